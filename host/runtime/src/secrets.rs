//! Where secret values come from: the process environment, then `$TALARIA_HOME/.env`.
//!
//! Values are read by the host only, at the HTTP boundary (see `net`); plugins can only ask
//! whether a granted secret has a value.
//!
//! ```
//! let s = talaria_runtime::Secrets::from_pairs([("API_KEY", "k-123")]);
//! assert_eq!(s.value("API_KEY").as_deref(), Some("k-123"));
//! ```

use std::collections::HashMap;
use std::path::Path;

/// Secret values by name.
#[derive(Debug, Default, Clone)]
pub struct Secrets {
    dotenv: HashMap<String, String>,
    use_env: bool,
}

impl Secrets {
    /// Secrets from the environment, then from the `.env` file at `dotenv` (if it exists).
    pub fn load(dotenv: &Path) -> Self {
        let dotenv = std::fs::read_to_string(dotenv).map(|t| parse_dotenv(&t)).unwrap_or_default();
        Self { dotenv, use_env: true }
    }

    /// Fixed values, ignoring the environment (tests, embedding).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let dotenv = pairs.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Self { dotenv, use_env: false }
    }

    /// The value of `name`, if any.
    pub fn value(&self, name: &str) -> Option<String> {
        let from_env = if self.use_env { std::env::var(name).ok() } else { None };
        from_env.or_else(|| self.dotenv.get(name).cloned()).filter(|v| !v.is_empty())
    }

    /// Every name defined in the `.env` file.
    pub fn dotenv_names(&self) -> impl Iterator<Item = &str> {
        self.dotenv.keys().map(String::as_str)
    }

    /// Every value the host treats as secret, by name: all of `.env`, and from the environment
    /// the variables named in `names` and those whose names say they hold a credential (see
    /// [`crate::leak`]).
    pub fn known(&self, names: &[String]) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self.dotenv.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        if self.use_env {
            for (name, value) in std::env::vars() {
                if names.contains(&name) || crate::leak::is_credential_name(&name) {
                    out.push((name, value));
                }
            }
        }
        out
    }
}

/// `KEY=VALUE` lines; `export ` prefixes, comments, blank lines and matching quotes handled.
fn parse_dotenv(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                return None;
            }
            let line = line.strip_prefix("export ").unwrap_or(line);
            let (k, v) = line.split_once('=')?;
            let v = v.trim();
            let v = match (v.chars().next(), v.chars().last()) {
                (Some(q @ ('"' | '\'')), Some(e)) if q == e && v.len() >= 2 => &v[1..v.len() - 1],
                _ => v.split(" #").next().unwrap_or(v).trim(),
            };
            Some((k.trim().to_string(), v.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotenv_lines_parse() {
        let m = parse_dotenv("# c\nA=1\nexport B=\"two words\"\nC='x#y'\nD=plain # note\n\nbad line\n");
        assert_eq!(m.get("A").map(String::as_str), Some("1"));
        assert_eq!(m.get("B").map(String::as_str), Some("two words"));
        assert_eq!(m.get("C").map(String::as_str), Some("x#y"));
        assert_eq!(m.get("D").map(String::as_str), Some("plain"));
        assert_eq!(m.len(), 4);
    }
}
