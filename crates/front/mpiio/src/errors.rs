//! Error classes the shim turns into MPI's (`MPI_ERR_*`), and the message
//! that goes into the MPI error string.

use weft_client::Error;

/// An MPI error class, as a plain number the shim maps to its MPI's value.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    NoSuchFile = 1,
    FileExists = 2,
    Access = 3,
    Amode = 4,
    ReadOnly = 5,
    NotSame = 6,
    Io = 7,
    NoSpace = 8,
    UnsupportedOperation = 9,
    UnsupportedDatarep = 10,
    Arg = 11,
    Count = 12,
    Type = 13,
    BadFile = 14,
    Comm = 15,
    Intern = 16,
    /// A call out of order (a split collective's end without its begin).
    Other = 17,
}

/// A failed call: its class and what went wrong, for the error string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fail {
    pub class: Class,
    pub message: String,
}

pub type Result<T> = std::result::Result<T, Fail>;

impl Fail {
    pub fn new(class: Class, message: impl Into<String>) -> Self {
        Fail { class, message: message.into() }
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        let class = match &e {
            Error::NotFound(_) => Class::NoSuchFile,
            Error::Exists(_) => Class::FileExists,
            Error::Permission(_) => Class::Access,
            Error::NotDir(_) | Error::IsDir(_) | Error::InvalidPath(_) => Class::BadFile,
            Error::BadRequest(_) | Error::View(_) => Class::Arg,
            Error::NoSpace { .. } => Class::NoSpace,
            Error::Comm(_) => Class::Comm,
            _ => Class::Io,
        };
        Fail { class, message: format!("weft: {e}") }
    }
}
