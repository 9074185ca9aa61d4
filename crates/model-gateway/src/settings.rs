//! What every backend's configuration shares: its connection setters, and reading its
//! environment variables (each value checked, a bad one a `ModelError::Config` that names the
//! variable and says what to write).

use std::time::Duration;

use crate::ModelError;

/// Where a configuration reads its variables: the process environment in `from_env`, a map in
/// the tests.
pub(crate) type Vars<'a> = &'a dyn Fn(&str) -> Option<String>;

/// A variable of the process environment; a blank value counts as unset.
pub(crate) fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// A positive number of seconds.
pub(crate) fn secs(name: &str, value: &str) -> Result<Duration, ModelError> {
    let secs: f64 = value
        .trim()
        .parse()
        .map_err(|_| ModelError::Config(format!("{name}={value:?}: use a number of seconds")))?;
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| ModelError::Config(format!("{name}={value:?}: use a positive number")))
}

/// A whole number of tokens.
#[cfg(any(feature = "anthropic", feature = "gemini", test))]
pub(crate) fn tokens<T: std::str::FromStr>(
    name: &str,
    value: &str,
    hint: &str,
) -> Result<T, ModelError> {
    value.trim().parse().map_err(|_| {
        ModelError::Config(format!(
            "{name}={value:?}: use a whole number of tokens{hint}"
        ))
    })
}

/// `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`).
pub(crate) fn flag(name: &str, value: &str) -> Result<bool, ModelError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(ModelError::Config(format!(
            "{name}={value:?}: use true or false"
        ))),
    }
}

/// `Name: value` pairs separated by newlines or `;`.
pub(crate) fn headers(name: &str, value: &str) -> Result<Vec<(String, String)>, ModelError> {
    value
        .split(['\n', ';'])
        .filter(|p| !p.trim().is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once(':').ok_or_else(|| {
                ModelError::Config(format!("{name}: {pair:?} is not `Name: value`"))
            })?;
            Ok((k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect()
}

/// The setters of the settings every backend's configuration has: base URL, API key, extra
/// headers, timeout, deadline and retry policy. `Duration` and `RetryPolicy` are the caller's
/// names (so the API reads as the caller's module writes it).
macro_rules! connection_setters {
    ($config:ident, $base_url_doc:literal) => {
        impl $config {
            #[doc = $base_url_doc]
            pub fn with_base_url(mut self, url: impl Into<String>) -> Self {
                self.base_url = url.into();
                self
            }
            /// Set the API key.
            pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
                self.api_key = Some(key.into());
                self
            }
            /// Add a header sent with every request.
            pub fn with_header(
                mut self,
                name: impl Into<String>,
                value: impl Into<String>,
            ) -> Self {
                self.headers.push((name.into(), value.into()));
                self
            }
            /// Set the per-attempt timeout ([`Self::timeout`]).
            pub fn with_timeout(mut self, t: Duration) -> Self {
                self.timeout = t;
                self
            }
            /// Set the deadline of a whole call ([`Self::deadline`]).
            pub fn with_deadline(mut self, d: Duration) -> Self {
                self.deadline = d;
                self
            }
            /// Set the retry policy.
            pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
                self.retry = retry;
                self
            }
        }
    };
}
pub(crate) use connection_setters;

/// A map as the variables a configuration reads, for the tests.
#[cfg(test)]
pub(crate) fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: std::collections::HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| map.get(k).cloned().filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_name_the_variable_and_say_what_to_write() {
        assert_eq!(secs("X", " 2.5 ").unwrap(), Duration::from_millis(2500));
        for bad in ["0", "-1", "soon", "NaN", "inf"] {
            let e = secs("X_TIMEOUT_SECS", bad).unwrap_err().to_string();
            assert!(e.contains("X_TIMEOUT_SECS"), "{e}");
        }
        assert_eq!(tokens::<u32>("T", "4096", "").unwrap(), 4096);
        assert!(tokens::<u32>("T", "-5", "").is_err());
        assert_eq!(tokens::<i32>("T", "-1", "").unwrap(), -1);
        assert!(flag("F", "On").unwrap() && !flag("F", "0").unwrap());
        assert!(
            flag("F", "maybe")
                .unwrap_err()
                .to_string()
                .contains("true or false")
        );
        assert_eq!(
            headers("H", "A: 1; B:two\nC : x:y").unwrap(),
            vec![
                ("A".to_owned(), "1".to_owned()),
                ("B".to_owned(), "two".to_owned()),
                ("C".to_owned(), "x:y".to_owned()),
            ]
        );
        assert!(
            headers("H", "no colon")
                .unwrap_err()
                .to_string()
                .contains("Name: value")
        );
    }
}
