//! Client errors as POSIX error numbers.

use fuser::Errno;
use weft_client::Error;

pub fn of(e: &Error) -> Errno {
    Errno::from_i32(e.errno())
}
