//! Toolsets: named groups of tools, which may include other toolsets, used to choose what a
//! session (or a child agent) may call.
//!
//! Built-in sets group the bundled and agent-level tools; every plugin is also a toolset named
//! after it; config adds custom ones. `all` (or `*`) is every tool.
//!
//! ```
//! use talaria_agent::toolsets::{Selection, Toolsets};
//! let sets = Toolsets::builtin();
//! let tools = ["read_file", "write_file", "terminal", "todo"].map(String::from);
//! let chosen = sets.resolve(&Selection::only(["files"]), &tools).expect("known toolset");
//! assert_eq!(chosen.into_iter().collect::<Vec<_>>(), ["read_file", "write_file"]);
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, LazyLock};

/// Why a selection cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolsetError {
    /// `name` is neither a toolset nor an available tool; `known` are the toolsets there are.
    #[error("unknown toolset `{name}`; known toolsets: all, {} (a single tool's name also works)", known.join(", "))]
    Unknown { name: String, known: Vec<String> },
}

/// One named group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolset {
    pub description: String,
    pub tools: Vec<String>,
    pub includes: Vec<String>,
}

/// Which toolsets a session uses: `enabled` (every tool when `None`) minus `disabled`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    pub enabled: Option<Vec<String>>,
    pub disabled: Vec<String>,
}

impl Selection {
    pub fn only<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Self {
        Self { enabled: Some(names.into_iter().map(Into::into).collect()), disabled: Vec::new() }
    }
}

/// Every known toolset by name. Cheap to clone: copies share the sets until one is changed
/// (every session starts from the same built-in ones).
#[derive(Debug, Clone, Default)]
pub struct Toolsets {
    sets: Arc<BTreeMap<String, Toolset>>,
}

fn set(description: &str, tools: &[&str], includes: &[&str]) -> Toolset {
    Toolset {
        description: description.to_string(),
        tools: tools.iter().map(|t| t.to_string()).collect(),
        includes: includes.iter().map(|t| t.to_string()).collect(),
    }
}

impl Toolsets {
    /// The built-in sets.
    pub fn builtin() -> Self {
        static BUILTIN: LazyLock<Arc<BTreeMap<String, Toolset>>> = LazyLock::new(|| Arc::new(Toolsets::made()));
        Self { sets: BUILTIN.clone() }
    }

    /// Add (or replace) a set: a plugin's tools, or a custom set from config.
    pub fn insert(&mut self, name: impl Into<String>, toolset: Toolset) {
        Arc::make_mut(&mut self.sets).insert(name.into(), toolset);
    }

    /// The built-in sets, made once per process.
    fn made() -> BTreeMap<String, Toolset> {
        let mut sets = BTreeMap::new();
        for (name, ts) in [
            (
                "files",
                set(
                    "read, write, patch and search files in the workspace",
                    &["read_file", "write_file", "patch", "search_files"],
                    &[],
                ),
            ),
            ("web", set("fetch web pages", &["web_fetch", "web_search"], &[])),
            ("terminal", set("run shell commands in the workspace", &["terminal"], &[])),
            ("todo", set("a task list for multi-step work", &["todo"], &[])),
            ("memory", set("persistent notes about the work and the user", &["memory"], &[])),
            ("session_search", set("search and read past conversations", &["session_search"], &[])),
            ("delegation", set("hand sub-tasks to child agents", &["delegate_task"], &[])),
            ("clarify", set("ask the user a question", &["clarify"], &[])),
            ("cronjob", set("schedule jobs that run later or repeatedly", &["cronjob"], &[])),
            (
                "skills",
                set("list and read skills: procedures for recurring tasks", &["skills_list", "skill_view"], &[]),
            ),
            ("skill_manage", set("create, edit and delete your skills", &["skill_manage"], &[])),
            ("coding", set("files, terminal, web and todo", &[], &["files", "terminal", "web", "todo"])),
        ] {
            sets.insert(name.to_string(), ts);
        }
        sets
    }

    pub fn get(&self, name: &str) -> Option<&Toolset> {
        self.sets.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.sets.keys().map(String::as_str)
    }

    /// Every tool of `name`, following includes (cycles are cut). `all` and `*` are every tool
    /// in `available`; a tool name is accepted as a set of itself.
    ///
    /// # Errors
    /// [`ToolsetError::Unknown`], with the known names listed.
    pub fn expand(&self, name: &str, available: &[String]) -> Result<BTreeSet<String>, ToolsetError> {
        let mut out = BTreeSet::new();
        let mut seen = BTreeSet::new();
        self.expand_into(name, available, &mut out, &mut seen)?;
        Ok(out)
    }

    fn expand_into(
        &self,
        name: &str,
        available: &[String],
        out: &mut BTreeSet<String>,
        seen: &mut BTreeSet<String>,
    ) -> Result<(), ToolsetError> {
        if !seen.insert(name.to_string()) {
            return Ok(());
        }
        if name == "all" || name == "*" {
            out.extend(available.iter().cloned());
            return Ok(());
        }
        let Some(set) = self.sets.get(name) else {
            if available.iter().any(|t| t == name) {
                out.insert(name.to_string());
                return Ok(());
            }
            return Err(ToolsetError::Unknown { name: name.to_string(), known: self.sets.keys().cloned().collect() });
        };
        out.extend(set.tools.iter().filter(|t| available.contains(t)).cloned());
        for inc in &set.includes {
            self.expand_into(inc, available, out, seen)?;
        }
        Ok(())
    }

    /// The tools a selection allows, among `available`.
    ///
    /// # Errors
    /// [`ToolsetError::Unknown`]: the selection names an unknown toolset.
    pub fn resolve(&self, selection: &Selection, available: &[String]) -> Result<BTreeSet<String>, ToolsetError> {
        let mut chosen = match &selection.enabled {
            None => available.iter().cloned().collect(),
            Some(names) => {
                let mut all = BTreeSet::new();
                for n in names {
                    all.extend(self.expand(n, available)?);
                }
                all
            }
        };
        for n in &selection.disabled {
            for t in self.expand(n, available)? {
                chosen.remove(&t);
            }
        }
        Ok(chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<String> {
        ["read_file", "write_file", "patch", "search_files", "terminal", "web_fetch", "todo", "memory", "get_weather"]
            .map(String::from)
            .to_vec()
    }

    #[test]
    fn includes_resolve_recursively_and_cycles_stop() {
        let mut sets = Toolsets::builtin();
        sets.insert("a", set("", &["todo"], &["b"]));
        sets.insert("b", set("", &["memory"], &["a"]));
        let got = sets.expand("a", &tools()).expect("known");
        assert_eq!(got.into_iter().collect::<Vec<_>>(), ["memory", "todo"]);
        let coding = sets.expand("coding", &tools()).expect("coding");
        assert!(coding.contains("terminal") && coding.contains("patch") && coding.contains("todo"));
        assert!(!coding.contains("memory"));
    }

    #[test]
    fn selection_is_enabled_minus_disabled() {
        let sets = Toolsets::builtin();
        let all = sets.resolve(&Selection::default(), &tools()).expect("all");
        assert_eq!(all.len(), tools().len());
        let sel = Selection { enabled: Some(vec!["all".into()]), disabled: vec!["terminal".into(), "memory".into()] };
        let got = sets.resolve(&sel, &tools()).expect("resolve");
        assert!(!got.contains("terminal") && !got.contains("memory") && got.contains("get_weather"));
        let sel = Selection::only(["files", "get_weather"]);
        assert_eq!(sets.resolve(&sel, &tools()).expect("tool name as set").len(), 5);
        let err = sets.resolve(&Selection::only(["filez"]), &tools()).expect_err("unknown").to_string();
        assert!(err.starts_with("unknown toolset `filez`; known toolsets: all, clarify, coding"), "{err}");
    }
}
