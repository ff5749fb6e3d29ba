//! Settings from variables, read once. Library code never reads the
//! environment: a front end (the `weft` command, the MPI-IO library, the
//! mount) hands a [`Vars`] to the typed settings of the layer it starts
//! (`ServerConfig`, `ClientOptions`), once, and they keep the values. Each
//! variable a layer reads is listed with its meaning in [`Setting`]s, which
//! `weft config` prints; a value that does not parse is an error naming
//! the variable, never a silent default.

use std::time::Duration;

/// Where settings come from: a lookup by variable name.
pub struct Vars<'a> {
    get: &'a dyn Fn(&str) -> Option<String>,
}

/// A variable whose value does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?}: {why}")]
pub struct BadSetting {
    pub name: &'static str,
    pub value: String,
    pub why: &'static str,
}

fn nothing(_: &str) -> Option<String> {
    None
}

/// The process's environment: the lookup front ends (and only they) pass
/// to [`Vars::new`], once, when they start.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl<'a> Vars<'a> {
    pub fn new(get: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Vars { get }
    }

    /// The process's environment (for front ends: see [`process_env`]).
    pub fn env() -> Vars<'static> {
        Vars { get: &process_env }
    }

    /// No variables: every setting at its default.
    pub fn none() -> Vars<'static> {
        Vars { get: &nothing }
    }

    /// The variable's text, if set (an empty value counts as unset).
    pub fn text(&self, name: &str) -> Option<String> {
        (self.get)(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
    }

    fn parsed<T>(&self, name: &'static str, why: &'static str, parse: impl Fn(&str) -> Option<T>) -> Result<Option<T>, BadSetting> {
        match self.text(name) {
            None => Ok(None),
            Some(v) => parse(&v).map(Some).ok_or(BadSetting { name, value: v, why }),
        }
    }

    /// A whole number (0 allowed).
    pub fn u64(&self, name: &'static str) -> Result<Option<u64>, BadSetting> {
        self.parsed(name, "not a whole number", |v| v.parse().ok())
    }

    /// A whole number of at least 1.
    pub fn count(&self, name: &'static str) -> Result<Option<u64>, BadSetting> {
        self.parsed(name, "not a whole number of at least 1", |v| v.parse().ok().filter(|&n: &u64| n > 0))
    }

    /// Milliseconds, at least 1.
    pub fn millis(&self, name: &'static str) -> Result<Option<Duration>, BadSetting> {
        Ok(self.count(name)?.map(Duration::from_millis))
    }

    /// Bytes, with an optional k, m or g suffix.
    pub fn size(&self, name: &'static str) -> Result<Option<u64>, BadSetting> {
        self.parsed(name, "not a size (bytes, or with a k, m or g suffix)", crate::budget::parse_size)
    }

    /// On unless `0` (or off, false, no).
    pub fn flag(&self, name: &'static str) -> Result<Option<bool>, BadSetting> {
        self.parsed(name, "not 0 or 1", |v| match v.to_ascii_lowercase().as_str() {
            "0" | "off" | "false" | "no" => Some(false),
            "1" | "on" | "true" | "yes" => Some(true),
            _ => None,
        })
    }

    /// One of a list of words.
    pub fn choice<T>(&self, name: &'static str, why: &'static str, parse: impl Fn(&str) -> Option<T>) -> Result<Option<T>, BadSetting> {
        self.parsed(name, why, parse)
    }
}

/// One setting as `weft config` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The variable that sets it.
    pub name: &'static str,
    /// Its value in effect.
    pub value: String,
    /// Whether the variable set it (else the default).
    pub set: bool,
    pub doc: &'static str,
}

impl Setting {
    pub fn new(vars: &Vars<'_>, name: &'static str, value: impl std::fmt::Display, doc: &'static str) -> Self {
        Setting { name, value: value.to_string(), set: vars.text(name).is_some(), doc }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_or_name_the_variable() {
        let get = |k: &str| match k {
            "A" => Some(" 12 ".to_owned()),
            "Z" => Some("0".into()),
            "S" => Some("4m".into()),
            "B" => Some("twelve".into()),
            "E" => Some("".into()),
            "F" => Some("off".into()),
            _ => None,
        };
        let v = Vars::new(&get);
        assert_eq!(v.u64("A"), Ok(Some(12)));
        assert_eq!(v.u64("Z"), Ok(Some(0)));
        assert_eq!(v.count("Z").unwrap_err().to_string(), "Z=\"0\": not a whole number of at least 1");
        assert_eq!(v.size("S"), Ok(Some(4 << 20)));
        assert_eq!(v.millis("A"), Ok(Some(Duration::from_millis(12))));
        assert!(v.u64("B").unwrap_err().to_string().starts_with("B=\"twelve\""));
        assert_eq!(v.u64("E"), Ok(None), "empty is unset");
        assert_eq!(v.u64("nope"), Ok(None));
        assert_eq!(v.flag("F"), Ok(Some(false)));
        assert_eq!(v.flag("A").unwrap_err().name, "A");
        assert_eq!(Vars::none().u64("A"), Ok(None));
    }
}
