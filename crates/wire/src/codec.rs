//! Little-endian encoder and bounds-checked decoder for message bodies.

use crate::DecodeError;

/// Appends fields to a body buffer.
#[derive(Debug, Default)]
pub struct Encoder {
    buf: Vec<u8>,
}

impl Encoder {
    pub fn new() -> Self {
        Self::default()
    }
    /// Appends to `buf` (a buffer the caller reuses; `finish` gives it back).
    pub fn onto(buf: Vec<u8>) -> Self {
        Encoder { buf }
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u8(u8::from(v))
    }
    pub fn raw(&mut self, v: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }
    /// A u32 length, then the bytes.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(u32::try_from(v.len()).expect("length checked by caller against limits"));
        self.raw(v)
    }
    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// Reads fields from a complete body, checking every length.
#[derive(Debug)]
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Decoder { buf, pos: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let have = self.buf.len() - self.pos;
        if n > have {
            return Err(DecodeError::Truncated { need: n, have });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    /// The next byte, left to be read (a tag that decides how to go on).
    pub fn peek_u8(&self) -> Result<u8, DecodeError> {
        self.buf.get(self.pos).copied().ok_or(DecodeError::Truncated { need: 1, have: 0 })
    }
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.array()?))
    }
    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::Invalid("bool must be 0 or 1")),
        }
    }
    pub fn fixed<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        self.array()
    }
    /// A u32 length (checked against `limit`), then that many bytes.
    pub fn bytes(&mut self, what: &'static str, limit: usize) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()? as usize;
        if n > limit {
            return Err(DecodeError::TooLong { what, len: n as u64, limit: limit as u64 });
        }
        self.take(n)
    }
    pub fn str(&mut self, what: &'static str, limit: usize) -> Result<String, DecodeError> {
        let b = self.bytes(what, limit)?;
        std::str::from_utf8(b).map(str::to_owned).map_err(|_| DecodeError::BadUtf8)
    }
    /// A u32 element count checked against `limit` and against the bytes
    /// left (each element needs at least `min_elem` bytes), so a hostile count
    /// cannot make the caller reserve memory it will never fill.
    pub fn count(&mut self, what: &'static str, limit: usize, min_elem: usize) -> Result<usize, DecodeError> {
        let n = self.u32()? as usize;
        if n > limit {
            return Err(DecodeError::TooLong { what, len: n as u64, limit: limit as u64 });
        }
        let have = self.buf.len() - self.pos;
        if n.saturating_mul(min_elem) > have {
            return Err(DecodeError::Truncated { need: n * min_elem, have });
        }
        Ok(n)
    }
    /// Every byte left (a record's last field, unprefixed).
    pub fn rest(&mut self) -> &'a [u8] {
        let r = &self.buf[self.pos..];
        self.pos = self.buf.len();
        r
    }
    /// Errors unless every byte was used.
    pub fn finish(self) -> Result<(), DecodeError> {
        match self.buf.len() - self.pos {
            0 => Ok(()),
            n => Err(DecodeError::Trailing(n)),
        }
    }
}
