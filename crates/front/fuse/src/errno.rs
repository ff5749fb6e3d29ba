//! Client errors as POSIX error numbers.

use fuser::Errno;
use weft_client::Error;

pub fn of(e: &Error) -> Errno {
    Errno::from_i32(match e {
        Error::NotFound(_) => libc::ENOENT,
        Error::Exists(_) => libc::EEXIST,
        Error::NotDir(_) => libc::ENOTDIR,
        Error::IsDir(_) => libc::EISDIR,
        Error::NotEmpty(_) => libc::ENOTEMPTY,
        Error::Permission(_) => libc::EACCES,
        Error::InvalidPath(_) => libc::EINVAL,
        Error::BadRequest(_) => libc::EINVAL,
        Error::NoSpace { .. } => libc::ENOSPC,
        Error::TooLarge { .. } => libc::EFBIG,
        Error::TooManyLinks(_) => libc::EMLINK,
        Error::CrossShard(_) => libc::EXDEV,
        Error::Busy { .. } => libc::EBUSY,
        _ => libc::EIO,
    })
}
