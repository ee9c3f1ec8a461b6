//! Tool arguments are checked against the tool's JSON Schema before the plugin runs, so every
//! plugin, whatever language it is written in, gets the same precise errors for the model.
//!
//! Validators are compiled once per tool. A tool whose schema does not compile is not checked
//! here (its plugin still checks its own arguments).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use talaria_protocol::{ToolError, ToolSpec};

/// At most this many problems are listed in one error.
const MAX_REPORTED: usize = 3;

/// (plugin, tool) -> its compiled validator, or `None` when the schema does not compile.
type Validators = HashMap<(String, String), Option<Arc<jsonschema::Validator>>>;

#[derive(Default)]
pub(crate) struct ArgChecker {
    validators: Mutex<Validators>,
}

impl ArgChecker {
    /// `Ok` when `args` fit `spec.parameters`, else the problems, each at its JSON path.
    pub fn check(&self, spec: &ToolSpec, args: &serde_json::Value) -> Result<(), ToolError> {
        let Some(validator) = self.validator(spec) else { return Ok(()) };
        // The common case, without collecting errors.
        if validator.is_valid(args) {
            return Ok(());
        }
        let problems: Vec<String> = validator
            .iter_errors(args)
            .take(MAX_REPORTED)
            .map(|e| match e.instance_path().as_str() {
                "" => e.to_string(),
                path => format!("`{path}`: {e}"),
            })
            .collect();
        if problems.is_empty() { Ok(()) } else { Err(ToolError::InvalidArgs(problems.join("; "))) }
    }

    fn validator(&self, spec: &ToolSpec) -> Option<Arc<jsonschema::Validator>> {
        let key = (spec.plugin.clone(), spec.name.clone());
        let mut cache = self.validators.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        cache
            .entry(key)
            .or_insert_with(|| match jsonschema::validator_for(&spec.parameters) {
                Ok(v) => Some(Arc::new(v)),
                Err(e) => {
                    tracing::warn!(plugin = %spec.plugin, tool = %spec.name, "parameters schema does not compile ({e}); arguments go unchecked");
                    None
                }
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ToolSpec {
        ToolSpec {
            name: "read_file".into(),
            description: String::new(),
            parameters: serde_json::json!({
                "type": "object",
                "properties": { "path": { "type": "string" }, "limit": { "type": "integer", "minimum": 1 } },
                "required": ["path"]
            }),
            plugin: "files".into(),
            annotations: Default::default(),
        }
    }

    #[test]
    fn fitting_arguments_pass() {
        ArgChecker::default().check(&spec(), &serde_json::json!({ "path": "a", "limit": 3 })).expect("valid");
    }

    #[test]
    fn each_problem_is_named_at_its_path() {
        let e = ArgChecker::default().check(&spec(), &serde_json::json!({ "limit": "ten" })).expect_err("invalid");
        let ToolError::InvalidArgs(m) = e else { panic!("{e:?}") };
        assert!(m.contains("\"path\" is a required property"), "{m}");
        assert!(m.contains("`/limit`: \"ten\" is not of type \"integer\""), "{m}");
    }

    #[test]
    fn a_schema_that_does_not_compile_is_skipped() {
        let mut s = spec();
        s.parameters = serde_json::json!({ "type": "object", "properties": { "x": { "type": 12 } } });
        ArgChecker::default().check(&s, &serde_json::json!({ "x": 1 })).expect("unchecked");
    }
}
