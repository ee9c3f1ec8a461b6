//! The checks a plugin's tool listing passes before the host believes a word of it.
//!
//! What a plugin's `list` export returns is untrusted input that every start reads, so it is
//! bounded before it is looked at closely. A listing is taken or refused as a whole; it is
//! refused when:
//! 1. it holds more than [`SpecLimits::max_tools`] specs. This is counted before any spec is
//!    looked at, so a plugin listing 200,000 tools is refused without parsing one schema;
//! 2. a spec is larger than [`SpecLimits::max_spec_bytes`]: its name, description and
//!    parameters JSON together, measured before the JSON is parsed;
//! 3. a name is not 1-64 characters of a-z, A-Z, 0-9, `_` or `-`;
//! 4. a name is listed twice (found with a hash set, in linear time);
//! 5. the parameters are not a JSON Schema of type object.
//!
//! A refusal names the plugin, the tool or the count, the limit, and the `[sandbox]` key of
//! config.toml that raises it:
//! ```text
//! plugin 'flood' lists 200000 tools; a plugin may offer at most 128 (raise `max_tools_per_plugin` under [sandbox] in config.toml)
//! ```
//! Descriptions that pass are cut to 4096 characters. A name the host refuses is shown with its
//! control characters escaped and cut short, so a refusal cannot carry a plugin's terminal
//! escapes.

use std::collections::HashSet;

use talaria_protocol::{ToolAnnotations, ToolSpec};

use crate::HostLimits;
use crate::host::api::RawSpec;
use crate::instance;
use crate::shown::visible;

/// Longest tool description kept.
const MAX_DESCRIPTION_CHARS: usize = 4096;
/// Longest refused name shown in a refusal.
const MAX_SHOWN_NAME_CHARS: usize = 80;

/// How much one plugin may list (from [`HostLimits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct SpecLimits {
    pub max_tools: usize,
    pub max_spec_bytes: usize,
}

impl From<&HostLimits> for SpecLimits {
    fn from(limits: &HostLimits) -> Self {
        Self { max_tools: limits.max_tools_per_plugin, max_spec_bytes: limits.max_spec_bytes }
    }
}

/// Why a listing was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SpecError {
    #[error(
        "plugin '{plugin}' lists {count} tools; a plugin may offer at most {limit} (raise `max_tools_per_plugin` under [sandbox] in config.toml)"
    )]
    TooMany { plugin: String, count: usize, limit: usize },
    #[error(
        "plugin '{plugin}' tool `{tool}`: its spec (name, description and parameters) is {bytes} bytes; a spec may be at most {} (raise `max_spec_kb` under [sandbox] in config.toml)",
        size(*limit)
    )]
    TooBig { plugin: String, tool: String, bytes: usize, limit: usize },
    #[error("plugin '{plugin}' tool `{tool}`: tool names are 1-64 characters of a-z, A-Z, 0-9, `_` or `-`")]
    BadName { plugin: String, tool: String },
    #[error("plugin '{plugin}' tool `{tool}`: listed twice")]
    Twice { plugin: String, tool: String },
    #[error("plugin '{plugin}' tool `{tool}`: parameters are not JSON: {why}")]
    NotJson { plugin: String, tool: String, why: String },
    #[error("plugin '{plugin}' tool `{tool}`: parameters must be a JSON Schema of type object")]
    NotObject { plugin: String, tool: String },
}

/// `bytes` as the operator configures it: `64 KiB`, or bytes when not a whole number of KiB.
fn size(bytes: usize) -> String {
    if bytes.is_multiple_of(1024) { format!("{} KiB", bytes / 1024) } else { format!("{bytes} bytes") }
}

/// Check what plugin `plugin` listed against `limits`, and make its specs.
///
/// # Errors
/// The first reason to refuse the listing, in the order of the module docs.
pub(crate) fn check(plugin: &str, raw: Vec<RawSpec>, limits: SpecLimits) -> Result<Vec<ToolSpec>, SpecError> {
    let refused = |tool: &str| (plugin.to_string(), tool.to_string());
    if raw.len() > limits.max_tools {
        return Err(SpecError::TooMany { plugin: plugin.to_string(), count: raw.len(), limit: limits.max_tools });
    }
    let mut seen = HashSet::with_capacity(raw.len());
    let mut specs = Vec::with_capacity(raw.len());
    for spec in raw {
        if !valid_tool_name(&spec.name) {
            let shown = visible(&spec.name, MAX_SHOWN_NAME_CHARS);
            let (plugin, tool) = refused(&shown);
            return Err(SpecError::BadName { plugin, tool });
        }
        let bytes = spec.name.len() + spec.description.len() + spec.parameters.len();
        if bytes > limits.max_spec_bytes {
            let (plugin, tool) = refused(&spec.name);
            return Err(SpecError::TooBig { plugin, tool, bytes, limit: limits.max_spec_bytes });
        }
        if !seen.insert(spec.name.clone()) {
            let (plugin, tool) = refused(&spec.name);
            return Err(SpecError::Twice { plugin, tool });
        }
        let parameters: serde_json::Value = serde_json::from_str(&spec.parameters).map_err(|e| {
            let (plugin, tool) = refused(&spec.name);
            SpecError::NotJson { plugin, tool, why: e.to_string() }
        })?;
        if parameters.get("type").and_then(|t| t.as_str()) != Some("object") {
            let (plugin, tool) = refused(&spec.name);
            return Err(SpecError::NotObject { plugin, tool });
        }
        specs.push(ToolSpec {
            name: spec.name,
            description: instance::clip(spec.description, MAX_DESCRIPTION_CHARS),
            parameters,
            plugin: plugin.to_string(),
            annotations: ToolAnnotations::default(),
        });
    }
    Ok(specs)
}

/// Check specs that passed [`check`] under other limits (they were cached) against `limits`:
/// their count and sizes. Parameters are measured as compact JSON, which is never longer than
/// what the plugin sent, so specs are never refused by a recheck under the limits they passed.
///
/// # Errors
/// [`SpecError::TooMany`] or [`SpecError::TooBig`].
pub(crate) fn recheck(plugin: &str, specs: &[ToolSpec], limits: SpecLimits) -> Result<(), SpecError> {
    if specs.len() > limits.max_tools {
        return Err(SpecError::TooMany { plugin: plugin.to_string(), count: specs.len(), limit: limits.max_tools });
    }
    for spec in specs {
        let parameters = serde_json::to_string(&spec.parameters).map_or(0, |p| p.len());
        let bytes = spec.name.len() + spec.description.len() + parameters;
        if bytes > limits.max_spec_bytes {
            return Err(SpecError::TooBig {
                plugin: plugin.to_string(),
                tool: spec.name.clone(),
                bytes,
                limit: limits.max_spec_bytes,
            });
        }
    }
    Ok(())
}

fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    const OBJECT: &str = r#"{"type":"object"}"#;

    fn raw(name: &str, description: &str, parameters: &str) -> RawSpec {
        RawSpec { name: name.into(), description: description.into(), parameters: parameters.into() }
    }

    fn many(n: usize) -> Vec<RawSpec> {
        (0..n).map(|i| raw(&format!("t{i}"), "d", OBJECT)).collect()
    }

    const DEFAULT: SpecLimits = SpecLimits { max_tools: 128, max_spec_bytes: 64 * 1024 };

    #[test]
    fn the_count_is_refused_before_any_spec_is_parsed() {
        // Every spec is malformed: the count is what is refused.
        let bad: Vec<RawSpec> = (0..129).map(|_| raw("bad name", "", "not json")).collect();
        assert_eq!(
            check("p", bad, DEFAULT).map(|s| s.len()),
            Err(SpecError::TooMany { plugin: "p".into(), count: 129, limit: 128 })
        );
        assert_eq!(check("p", many(128), DEFAULT).map(|s| s.len()), Ok(128));
    }

    #[test]
    fn duplicates_among_200000_specs_are_found_in_linear_time() {
        let mut specs = many(200_000);
        specs.push(raw("t7", "again", OBJECT));
        let limits = SpecLimits { max_tools: 300_000, ..DEFAULT };
        let started = std::time::Instant::now();
        assert_eq!(
            check("p", specs, limits).map(|s| s.len()).map_err(|e| e.to_string()),
            Err("plugin 'p' tool `t7`: listed twice".to_string())
        );
        // Quadratic, this took minutes; linear, it is well under a second even in a debug build.
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "took {:?}", started.elapsed());
    }

    #[test]
    fn a_spec_is_measured_by_name_description_and_parameters() {
        let limit = 64 * 1024;
        let fits = raw("big", &"x".repeat(limit - 3 - OBJECT.len()), OBJECT);
        assert!(check("p", vec![fits], DEFAULT).is_ok());
        let over = raw("big", &"x".repeat(limit - 3 - OBJECT.len() + 1), OBJECT);
        assert_eq!(
            check("p", vec![over], DEFAULT).map(|s| s.len()).map_err(|e| e.to_string()),
            Err("plugin 'p' tool `big`: its spec (name, description and parameters) is 65537 bytes; a spec may be \
                 at most 64 KiB (raise `max_spec_kb` under [sandbox] in config.toml)"
                .to_string())
        );
        let odd = SpecLimits { max_spec_bytes: 100, ..DEFAULT };
        let e = check("p", vec![raw("t", &"y".repeat(100), OBJECT)], odd).map(|s| s.len()).map_err(|e| e.to_string());
        assert_eq!(
            e,
            Err("plugin 'p' tool `t`: its spec (name, description and parameters) is 118 bytes; a spec may be at \
                 most 100 bytes (raise `max_spec_kb` under [sandbox] in config.toml)"
                .to_string())
        );
    }

    #[test]
    fn a_refused_name_is_shown_escaped_and_short() {
        let name = format!("x\n\u{1b}[2J{}", "y".repeat(200));
        let e = check("p", vec![raw(&name, "", OBJECT)], DEFAULT).map(|s| s.len()).map_err(|e| e.to_string());
        let shown = format!("x\\n\\x1b[2J{}…", "y".repeat(69));
        assert_eq!(
            e,
            Err(format!("plugin 'p' tool `{shown}`: tool names are 1-64 characters of a-z, A-Z, 0-9, `_` or `-`"))
        );
    }

    #[test]
    fn parameters_must_be_an_object_schema() {
        let e = |p: &str| check("p", vec![raw("t", "", p)], DEFAULT).map(|s| s.len()).map_err(|e| e.to_string());
        assert_eq!(
            e(r#"{"type":"string"}"#),
            Err("plugin 'p' tool `t`: parameters must be a JSON Schema of type object".into())
        );
        assert_eq!(
            e("{"),
            Err("plugin 'p' tool `t`: parameters are not JSON: EOF while parsing an object at line 1 column 1".into())
        );
    }

    #[test]
    fn cached_specs_are_held_to_lowered_limits() {
        let specs = check("p", many(3), DEFAULT).expect("fits");
        assert_eq!(recheck("p", &specs, DEFAULT), Ok(()));
        assert_eq!(
            recheck("p", &specs, SpecLimits { max_tools: 2, ..DEFAULT }),
            Err(SpecError::TooMany { plugin: "p".into(), count: 3, limit: 2 })
        );
        // "t0" + "d" + {"type":"object"} = 20 bytes.
        assert_eq!(
            recheck("p", &specs, SpecLimits { max_spec_bytes: 19, ..DEFAULT }),
            Err(SpecError::TooBig { plugin: "p".into(), tool: "t0".into(), bytes: 20, limit: 19 })
        );
    }
}
