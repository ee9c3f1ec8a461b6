//! Guard rules: parsed from the operator's config, matched against one tool call.
//!
//! A rule names a tool (or `*`) and up to three matchers; it matches a call when the tool matches
//! and **every** matcher it has matches (a rule without matchers matches every call of its tool):
//!
//! - `path_globs`: any glob matches the call's `path` argument. The path is resolved against the
//!   session's workspace and `.`/`..` are folded lexically, so `./a/../secrets/x` and
//!   `/ws/secrets/x` are both `secrets/x`. Relative globs match paths inside the workspace,
//!   absolute globs (`/etc/**`) match the absolute path, and a glob without `/` (`*.pem`) also
//!   matches the file name alone. `*` stops at `/`; `**` crosses it.
//! - `command_regex`: the regex is found in the call's `command` argument.
//! - `args_regex`: the regex is found in the raw JSON arguments.
//!
//! [`Rules::check`] looks at every rule: any matching `block` rule blocks (the first one names
//! itself), otherwise any matching `approve` rule asks for a human's approval.
//!
//! ```ignore
//! let rules = Rules::parse(&serde_json::json!([{ "tool": "write_file", "path_globs": ["secrets/**"] }]))?;
//! let verdict = rules.check(&Call { tool: "write_file", arguments: r#"{"path":"secrets/a"}"#, workspace: "/ws" });
//! assert!(matches!(verdict, Verdict::Block(_)));
//! ```

use std::fmt;
use std::path::{Component, Path, PathBuf};

use globset::{Glob, GlobBuilder, GlobMatcher};
use regex::Regex;
use serde::Deserialize;

/// A rule as the operator writes it in `[plugins.guard.config] rules`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleToml {
    tool: String,
    #[serde(default)]
    path_globs: Option<Vec<String>>,
    #[serde(default)]
    command_regex: Option<String>,
    #[serde(default)]
    args_regex: Option<String>,
    #[serde(default)]
    action: Action,
    #[serde(default)]
    message: Option<String>,
}

/// What a matching rule does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// The tool does not run; the model is told why.
    #[default]
    Block,
    /// The tool runs only if a human approves.
    Approve,
}

/// One compiled rule.
#[derive(Debug)]
struct Rule {
    /// 1-based, as the operator counts them.
    number: usize,
    tool: String,
    globs: Vec<(String, GlobKind, GlobMatcher)>,
    command: Option<Regex>,
    args: Option<Regex>,
    action: Action,
    message: Option<String>,
}

/// What a glob is matched against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GlobKind {
    /// Starts with `/`: the absolute path.
    Absolute,
    /// Has a `/`: the path relative to the workspace.
    Relative,
    /// No `/`: the relative path or the file name.
    Name,
}

/// The compiled rules.
#[derive(Debug, Default)]
pub struct Rules {
    rules: Vec<Rule>,
}

/// Why the configuration cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// The call being checked.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub tool: &'a str,
    /// The model's JSON arguments.
    pub arguments: &'a str,
    /// Absolute path of the session's workspace ("" when unknown).
    pub workspace: &'a str,
}

/// The outcome for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Block(String),
    Approve(String),
}

impl Rules {
    /// Compile the `rules` setting (a JSON array of rule tables).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming the rule and what is wrong with it: not a list, an unknown or
    /// mistyped field, an empty tool name, a bad glob or regex.
    pub fn parse(value: &serde_json::Value) -> Result<Self, ConfigError> {
        let list = value
            .as_array()
            .ok_or_else(|| ConfigError(format!("`rules` must be a list of rule tables, not {}", kind_of(value))))?;
        let rules = list.iter().enumerate().map(|(i, v)| Rule::parse(i + 1, v)).collect::<Result<_, _>>()?;
        Ok(Self { rules })
    }

    /// How many rules there are.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Check one call against every rule.
    pub fn check(&self, call: &Call<'_>) -> Verdict {
        let args = Args::new(call);
        let mut approval = None;
        for rule in &self.rules {
            let Some(why) = rule.matches(call, &args) else { continue };
            match rule.action {
                Action::Block => {
                    return Verdict::Block(
                        rule.message.clone().unwrap_or_else(|| format!("blocked by guard rule {}: {why}", rule.number)),
                    );
                }
                Action::Approve => {
                    approval.get_or_insert_with(|| {
                        rule.message
                            .clone()
                            .unwrap_or_else(|| format!("guard rule {} asks for approval: {why}", rule.number))
                    });
                }
            }
        }
        approval.map_or(Verdict::Allow, Verdict::Approve)
    }
}

impl Rule {
    fn parse(number: usize, value: &serde_json::Value) -> Result<Self, ConfigError> {
        let err = |m: String| ConfigError(format!("rule {number}: {m}"));
        let raw = RuleToml::deserialize(value).map_err(|e| err(e.to_string()))?;
        let tool = raw.tool.trim().to_string();
        if tool.is_empty() {
            return Err(err("`tool` is empty; give a tool name or \"*\"".into()));
        }
        let globs = raw
            .path_globs
            .unwrap_or_default()
            .into_iter()
            .map(|g| compile_glob(&g).map_err(|e| err(format!("path glob {g:?}: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let regex = |field: &str, pattern: Option<String>| {
            pattern.map(|p| Regex::new(&p).map_err(|e| err(format!("`{field}` {p:?}: {e}")))).transpose()
        };
        Ok(Self {
            number,
            tool,
            globs,
            command: regex("command_regex", raw.command_regex)?,
            args: regex("args_regex", raw.args_regex)?,
            action: raw.action,
            message: raw.message.filter(|m| !m.trim().is_empty()),
        })
    }

    /// Why this rule matches the call, or `None` when it does not.
    fn matches(&self, call: &Call<'_>, args: &Args) -> Option<String> {
        if self.tool != "*" && self.tool != call.tool {
            return None;
        }
        let mut why = Vec::new();
        if !self.globs.is_empty() {
            let path = args.path.as_ref()?;
            let glob = self.globs.iter().find(|(_, kind, m)| path.matches(*kind, m))?;
            why.push(format!("{} to {} matches {:?}", call.tool, path.shown, glob.0));
        }
        if let Some(re) = &self.command {
            let command = args.command.as_deref()?;
            if !re.is_match(command) {
                return None;
            }
            why.push(format!("{} command {:?} matches /{}/", call.tool, clip(command, 120), re.as_str()));
        }
        if let Some(re) = &self.args {
            if !re.is_match(call.arguments) {
                return None;
            }
            why.push(format!("{} arguments match /{}/", call.tool, re.as_str()));
        }
        if why.is_empty() {
            why.push(format!("{} is not allowed", call.tool));
        }
        Some(why.join(" and "))
    }
}

fn compile_glob(pattern: &str) -> Result<(String, GlobKind, GlobMatcher), globset::Error> {
    let kind = if pattern.starts_with('/') {
        GlobKind::Absolute
    } else if pattern.contains('/') {
        GlobKind::Relative
    } else {
        GlobKind::Name
    };
    // A relative glob written `./secrets/**` means `secrets/**`.
    let body = pattern.strip_prefix("./").unwrap_or(pattern);
    let glob: Glob = GlobBuilder::new(body).literal_separator(true).backslash_escape(true).build()?;
    Ok((pattern.to_string(), kind, glob.compile_matcher()))
}

/// The arguments the matchers look at, decoded once per call.
struct Args {
    path: Option<CallPath>,
    command: Option<String>,
}

impl Args {
    fn new(call: &Call<'_>) -> Self {
        let json: Option<serde_json::Value> = serde_json::from_str(call.arguments).ok();
        let field = |name: &str| json.as_ref().and_then(|v| v.get(name)).and_then(|v| v.as_str()).map(str::to_string);
        Self {
            path: field("path").filter(|p| !p.is_empty()).map(|p| CallPath::new(call.workspace, &p)),
            command: field("command"),
        }
    }
}

/// A `path` argument, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CallPath {
    /// Lexically normalised; absolute when the workspace or the argument is.
    absolute: PathBuf,
    /// Relative to the workspace, when the path lies inside it.
    relative: Option<PathBuf>,
    /// How to name it in a message: relative when inside, else absolute.
    shown: String,
}

impl CallPath {
    fn new(workspace: &str, path: &str) -> Self {
        let workspace = normalize(Path::new(workspace));
        let absolute = normalize(&workspace.join(path));
        let relative = match absolute.strip_prefix(&workspace) {
            Ok(rel) if !workspace.as_os_str().is_empty() || !escapes(rel) => Some(rel.to_path_buf()),
            _ => None,
        };
        let shown = match &relative {
            Some(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Some(rel) => rel.display().to_string(),
            None => absolute.display().to_string(),
        };
        Self { absolute, relative, shown }
    }

    fn matches(&self, kind: GlobKind, glob: &GlobMatcher) -> bool {
        match kind {
            GlobKind::Absolute => self.absolute.is_absolute() && glob.is_match(&self.absolute),
            GlobKind::Relative => self.relative.as_ref().is_some_and(|r| glob.is_match(r)),
            GlobKind::Name => {
                self.relative.as_ref().is_some_and(|r| glob.is_match(r))
                    || self.absolute.file_name().is_some_and(|name| glob.is_match(name))
            }
        }
    }
}

/// Fold `.` and `..` without touching the filesystem. `..` above the root stays at the root;
/// above the start of a relative path it is kept, so the path still says it escapes.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => match out.components().next_back() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir | Component::Prefix(_)) => {}
                Some(Component::ParentDir | Component::CurDir) | None => out.push(".."),
            },
            other => out.push(other),
        }
    }
    out
}

/// A relative path that climbs out of where it starts.
fn escapes(path: &Path) -> bool {
    matches!(path.components().next(), Some(Component::ParentDir))
}

fn clip(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

fn kind_of(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "a table",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(v: serde_json::Value) -> Rules {
        Rules::parse(&v).expect("valid rules")
    }

    fn check(rules: &Rules, tool: &str, args: serde_json::Value) -> Verdict {
        rules.check(&Call { tool, arguments: &args.to_string(), workspace: "/ws" })
    }

    #[test]
    fn a_path_glob_blocks_and_names_the_rule() {
        let r = rules(json!([{ "tool": "write_file", "path_globs": ["secrets/**", "*.pem"] }]));
        assert_eq!(
            check(&r, "write_file", json!({"path": "secrets/api.txt", "content": "x"})),
            Verdict::Block("blocked by guard rule 1: write_file to secrets/api.txt matches \"secrets/**\"".into())
        );
        assert_eq!(
            check(&r, "write_file", json!({"path": "certs/deep/key.pem"})),
            Verdict::Block("blocked by guard rule 1: write_file to certs/deep/key.pem matches \"*.pem\"".into())
        );
        assert_eq!(check(&r, "write_file", json!({"path": "src/main.rs"})), Verdict::Allow);
        assert_eq!(check(&r, "read_file", json!({"path": "secrets/api.txt"})), Verdict::Allow, "other tool");
        assert_eq!(check(&r, "write_file", json!({"content": "no path"})), Verdict::Allow);
    }

    #[test]
    fn paths_are_normalised_before_matching() {
        let r = rules(json!([{ "tool": "*", "path_globs": ["secrets/**"] }]));
        for path in ["./secrets/a", "src/../secrets/a", "/ws/secrets/a", "/ws/src/../secrets/a", "secrets/./x/../a"] {
            assert!(matches!(check(&r, "patch", json!({ "path": path })), Verdict::Block(_)), "{path}");
        }
        for path in ["secretsx/a", "../ws2/secrets/a", "/other/secrets/a", "src/secrets/a"] {
            assert_eq!(check(&r, "patch", json!({ "path": path })), Verdict::Allow, "{path}");
        }
        let abs = rules(json!([{ "tool": "*", "path_globs": ["/etc/**"] }]));
        assert!(
            matches!(check(&abs, "read_file", json!({"path": "../../etc/passwd"})), Verdict::Block(m) if m.contains("to /etc/passwd matches"))
        );
        assert!(matches!(check(&abs, "read_file", json!({"path": "/etc/../etc/shadow"})), Verdict::Block(_)));
        assert_eq!(check(&abs, "read_file", json!({"path": "etc/passwd"})), Verdict::Allow);
    }

    #[test]
    fn star_does_not_cross_directories_but_name_globs_match_file_names() {
        let r = rules(json!([{ "tool": "*", "path_globs": ["config/*.toml", ".env"] }]));
        assert!(matches!(check(&r, "write_file", json!({"path": "config/a.toml"})), Verdict::Block(_)));
        assert_eq!(check(&r, "write_file", json!({"path": "config/sub/a.toml"})), Verdict::Allow);
        assert!(matches!(check(&r, "write_file", json!({"path": "deploy/.env"})), Verdict::Block(_)));
        assert!(matches!(check(&r, "write_file", json!({"path": "/elsewhere/.env"})), Verdict::Block(_)));
    }

    #[test]
    fn command_and_args_regexes() {
        let r = rules(json!([
            { "tool": "terminal", "command_regex": "\\bgit\\s+push\\b.*--force" },
            { "tool": "*", "args_regex": "(?i)prod", "action": "approve" },
        ]));
        assert_eq!(
            check(&r, "terminal", json!({"command": "git push origin main --force"})),
            Verdict::Block(
                "blocked by guard rule 1: terminal command \"git push origin main --force\" matches /\\bgit\\s+push\\b.*--force/"
                    .into()
            )
        );
        assert_eq!(check(&r, "terminal", json!({"command": "git push origin main"})), Verdict::Allow);
        assert_eq!(
            check(&r, "http_get", json!({"url": "https://PROD.example.com"})),
            Verdict::Approve("guard rule 2 asks for approval: http_get arguments match /(?i)prod/".into())
        );
        assert_eq!(check(&r, "read_file", json!({"pattern": "x"})), Verdict::Allow);
    }

    #[test]
    fn every_matcher_of_a_rule_must_match() {
        let r = rules(json!([{ "tool": "terminal", "command_regex": "rm ", "args_regex": "\"cwd\"" }]));
        assert_eq!(check(&r, "terminal", json!({"command": "rm -r x"})), Verdict::Allow);
        assert!(matches!(
            check(&r, "terminal", json!({"command": "rm -r x", "cwd": "/"})),
            Verdict::Block(m) if m.contains(" and ")
        ));
    }

    #[test]
    fn a_rule_without_matchers_covers_its_whole_tool_and_messages_replace_the_default() {
        let r = rules(
            json!([{ "tool": "delete_file", "message": "deleting is off today" }, { "tool": "web_fetch", "action": "approve" }]),
        );
        assert_eq!(check(&r, "delete_file", json!({})), Verdict::Block("deleting is off today".into()));
        assert_eq!(
            check(&r, "web_fetch", json!({"url": "x"})),
            Verdict::Approve("guard rule 2 asks for approval: web_fetch is not allowed".into())
        );
    }

    #[test]
    fn block_wins_over_approve_whatever_the_order() {
        let r = rules(json!([{ "tool": "*", "action": "approve" }, { "tool": "terminal", "command_regex": "sudo" }]));
        assert!(
            matches!(check(&r, "terminal", json!({"command": "sudo ls"})), Verdict::Block(m) if m.starts_with("blocked by guard rule 2"))
        );
        assert!(
            matches!(check(&r, "terminal", json!({"command": "ls"})), Verdict::Approve(m) if m.starts_with("guard rule 1"))
        );
    }

    #[test]
    fn malformed_rules_are_refused_with_the_reason() {
        let bad = |v: serde_json::Value| Rules::parse(&v).expect_err("refused").0;
        assert_eq!(bad(json!({"tool": "x"})), "`rules` must be a list of rule tables, not a table");
        assert!(bad(json!([{ "tool": "x", "path_glob": ["a"] }])).starts_with("rule 1: unknown field `path_glob`"));
        assert!(
            bad(json!([{ "tool": "x" }, { "tool": "y", "action": "allow" }]))
                .starts_with("rule 2: unknown variant `allow`")
        );
        assert!(bad(json!([{ "tool": " " }])).contains("`tool` is empty"));
        assert!(bad(json!([{ "tool": "x", "command_regex": "(" }])).starts_with("rule 1: `command_regex` \"(\":"));
        assert!(bad(json!([{ "tool": "x", "path_globs": ["a/[b"] }])).starts_with("rule 1: path glob \"a/[b\":"));
        assert!(bad(json!([{ "command_regex": "x" }])).contains("missing field `tool`"));
    }

    #[test]
    fn normalize_folds_lexically() {
        assert_eq!(normalize(Path::new("/a/b/../../../c")), PathBuf::from("/c"));
        assert_eq!(normalize(Path::new("a/./b/../c")), PathBuf::from("a/c"));
        assert_eq!(normalize(Path::new("../a/../../b")), PathBuf::from("../../b"));
        let outside = CallPath::new("", "../x");
        assert_eq!(outside.relative, None);
        let inside = CallPath::new("", "a/../x");
        assert_eq!(inside.relative, Some(PathBuf::from("x")));
        assert_eq!(CallPath::new("/ws", "/ws").shown, ".");
    }
}
