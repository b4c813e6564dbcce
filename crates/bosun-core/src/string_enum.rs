//! `string_enum!`: the one way a fieldless domain enum gets its string form.

/// Gives a fieldless enum its string form: `as_str`, `Display`, and a `FromStr` whose
/// error names `$field` and lists every accepted string.
///
/// `string_enum!(Phase, "phase", Plan => "plan", Apply => "apply");`
macro_rules! string_enum {
    ($t:ty, $field:literal, $($v:ident => $s:literal),+ $(,)?) => {
        impl $t {
            pub fn as_str(self) -> &'static str {
                match self { $(<$t>::$v => $s),+ }
            }
        }
        impl ::std::fmt::Display for $t {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl ::std::str::FromStr for $t {
            type Err = $crate::ValidationError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($s => Ok(<$t>::$v),)+
                    other => Err($crate::ValidationError::new(
                        $field,
                        format!("unknown {} {other:?}; expected one of: {}", $field, [$($s),+].join(", ")),
                    )),
                }
            }
        }
    };
}

pub(crate) use string_enum;
