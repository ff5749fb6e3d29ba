//! A response's body as the client hands it to its caller: most answers
//! (an acknowledgement, a size, an error) are a few dozen bytes, kept
//! inline so that an answer costs no allocation and no free (paper 003's
//! count: an allocation and a free are about a tenth of a small request's
//! instructions); a longer one is kept on the heap as it came.

use std::fmt;
use std::ops::Deref;

/// Bytes kept inline: the data servers' answers (written, read, size) and
/// errors' codes with short words; a `Reply` then is no larger than the
/// error a call may end with instead, so a call's result is no larger.
const INLINE: usize = 46;

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Vec<u8>),
}

/// A response body: derefs to its bytes.
#[derive(Clone)]
pub struct Body(Repr);

impl Body {
    /// A copy of `bytes` (inline if short enough).
    pub fn copy_of(bytes: &[u8]) -> Self {
        match u8::try_from(bytes.len()) {
            Ok(len) if bytes.len() <= INLINE => {
                let mut inline = [0u8; INLINE];
                inline[..bytes.len()].copy_from_slice(bytes);
                Body(Repr::Inline { len, bytes: inline })
            }
            _ => Body(Repr::Heap(bytes.to_vec())),
        }
    }

    /// The bytes as a vector of their own.
    pub fn into_vec(self) -> Vec<u8> {
        match self.0 {
            Repr::Heap(v) => v,
            Repr::Inline { .. } => self.to_vec(),
        }
    }
}

/// A body received in a buffer of its own (a long one, read part by part)
/// keeps that buffer.
impl From<Vec<u8>> for Body {
    fn from(v: Vec<u8>) -> Self {
        Body(Repr::Heap(v))
    }
}

impl Deref for Body {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Heap(v) => v,
        }
    }
}

impl AsRef<[u8]> for Body {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// Equal bytes are equal bodies, wherever they are kept.
impl PartialEq for Body {
    fn eq(&self, other: &Body) -> bool {
        **self == **other
    }
}

impl Eq for Body {}

impl PartialEq<[u8]> for Body {
    fn eq(&self, other: &[u8]) -> bool {
        **self == *other
    }
}

impl PartialEq<Vec<u8>> for Body {
    fn eq(&self, other: &Vec<u8>) -> bool {
        **self == **other
    }
}

impl<const N: usize> PartialEq<[u8; N]> for Body {
    fn eq(&self, other: &[u8; N]) -> bool {
        **self == other[..]
    }
}

impl<const N: usize> PartialEq<&[u8; N]> for Body {
    fn eq(&self, other: &&[u8; N]) -> bool {
        **self == other[..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A body holds exactly the bytes it was made of, however long,
        /// and compares by them whether inline or on the heap.
        #[test]
        fn a_body_is_its_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let b = Body::copy_of(&bytes);
            prop_assert_eq!(&*b, &bytes[..]);
            prop_assert_eq!(matches!(b.0, Repr::Inline { .. }), bytes.len() <= INLINE);
            let heap = Body::from(bytes.clone());
            prop_assert_eq!(&b, &heap);
            prop_assert!(b == bytes);
            prop_assert_eq!(b.clone().into_vec(), bytes.clone());
            prop_assert_eq!(heap.into_vec(), bytes);
        }
    }

    #[test]
    fn bodies_of_other_bytes_differ() {
        assert_ne!(Body::copy_of(b"ab"), Body::copy_of(b"abc"));
        assert_ne!(Body::copy_of(b"ab"), Body::from(b"ac".to_vec()));
        assert!(Body::copy_of(b"") == *b"");
        assert_eq!(format!("{:?}", Body::copy_of(b"\x01")), "[1]");
    }
}
