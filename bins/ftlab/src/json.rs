//! Just enough JSON to print results (`ftlab demo --json`, `ftlab bench
//! --json`): values built in order, written on one line.

use std::fmt;

/// A JSON value.
#[derive(Clone, Debug)]
pub enum J {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    /// An object from (key, value) pairs, in order.
    pub fn obj<K: Into<String>>(pairs: impl IntoIterator<Item = (K, J)>) -> J {
        J::Obj(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// A string.
    pub fn s(v: impl Into<String>) -> J {
        J::Str(v.into())
    }

    /// A number, or null when absent (or not finite).
    pub fn opt(v: Option<f64>) -> J {
        v.map_or(J::Null, J::Num)
    }

    /// A string, or null when absent.
    pub fn opt_s(v: Option<impl Into<String>>) -> J {
        v.map_or(J::Null, |v| J::Str(v.into()))
    }
}

impl From<f64> for J {
    fn from(v: f64) -> J {
        J::Num(v)
    }
}

impl From<usize> for J {
    fn from(v: usize) -> J {
        J::Num(v as f64)
    }
}

impl From<u64> for J {
    fn from(v: u64) -> J {
        J::Num(v as f64)
    }
}

impl From<bool> for J {
    fn from(v: bool) -> J {
        J::Bool(v)
    }
}

fn write_str(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_str("\"")?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            c if (c as u32) < 0x20 => write!(f, "\\u{:04x}", c as u32)?,
            c => write!(f, "{c}")?,
        }
    }
    f.write_str("\"")
}

impl fmt::Display for J {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            J::Null => f.write_str("null"),
            J::Bool(b) => write!(f, "{b}"),
            J::Num(v) if !v.is_finite() => f.write_str("null"),
            J::Num(v) if v.fract() == 0.0 && v.abs() < 1e15 => write!(f, "{}", *v as i64),
            J::Num(v) => write!(f, "{}", (v * 1e6).round() / 1e6),
            J::Str(s) => write_str(f, s),
            J::Arr(a) => {
                f.write_str("[")?;
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
            J::Obj(o) => {
                f.write_str("{")?;
                for (i, (k, v)) in o.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write_str(f, k)?;
                    write!(f, ":{v}")?;
                }
                f.write_str("}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_written_as_json() {
        let v = J::obj([
            ("a", J::from(1.5)),
            ("b", J::s("x\"y\n")),
            ("c", J::Arr(vec![J::Null, J::from(true), J::from(3usize)])),
            ("d", J::Num(f64::NAN)),
        ]);
        assert_eq!(v.to_string(), r#"{"a":1.5,"b":"x\"y\n","c":[null,true,3],"d":null}"#);
    }
}
