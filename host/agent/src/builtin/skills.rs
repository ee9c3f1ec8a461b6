//! `skills_list` and `skill_view`: the skills of this session ([`crate::skills`]), as the model
//! reads them. Only the skills whose requirements are met are offered; reading one runs nothing.
//! `skill_manage`: the agent writing skills ([`crate::skills::manage`]).

use serde_json::{Value, json};
use talaria_protocol::{ToolAnnotations, ToolError, ToolSpec};

use super::PROVIDER;
use crate::skills::Skill;

pub const LIST: &str = "skills_list";
pub const VIEW: &str = "skill_view";
pub const MANAGE: &str = "skill_manage";

/// The two tools' specs.
pub fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: LIST.into(),
            description: "List the skills you can use here (procedures for recurring tasks), optionally of one \
                          category: name, description, category, tags. Read one with skill_view."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {"category": {"type": "string", "description": "Only this category."}},
                "additionalProperties": false
            }),
            plugin: PROVIDER.into(),
            annotations: ToolAnnotations::reads(&[]),
        },
        ToolSpec {
            name: VIEW.into(),
            description: "Read a skill: its whole SKILL.md (and the list of its files), or one of its files \
                          (`references/...`, `templates/...`, `scripts/...`). Follow it when it fits the task; \
                          its scripts run only through your ordinary tools."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "The skill's name, as skills_list gives it."},
                    "file": {"type": "string", "description": "One of its files instead of SKILL.md."}
                },
                "required": ["name"],
                "additionalProperties": false
            }),
            plugin: PROVIDER.into(),
            annotations: ToolAnnotations::reads(&[]),
        },
        ToolSpec {
            name: MANAGE.into(),
            description: "Keep what you learned as a skill the next sessions can use: `create` one (the whole \
                          SKILL.md: front matter with `name` and `description`, then When to use, Procedure, \
                          Pitfalls, Verification), `edit` it (the whole new SKILL.md), `write_file` or \
                          `remove_file` one file under references/, templates/ or scripts/, or `delete` it. \
                          Make one after a task that took several steps to get right. The user is told; \
                          changing a skill they wrote needs their yes."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["create", "edit", "delete", "write_file", "remove_file"]},
                    "name": {"type": "string", "description": "The skill's name: lowercase letters, digits and `-`."},
                    "category": {"type": "string", "description": "For create: its category (default general)."},
                    "content": {"type": "string", "description": "The whole SKILL.md (create, edit), or the file's text (write_file)."},
                    "file": {"type": "string", "description": "For write_file and remove_file: a path under references/, templates/ or scripts/."}
                },
                "required": ["action", "name"],
                "additionalProperties": false
            }),
            plugin: PROVIDER.into(),
            annotations: ToolAnnotations { open_world: false, ..ToolAnnotations::default() },
        },
    ]
}

/// `skills_list`.
pub fn list(skills: &[Skill], args: &Value) -> Value {
    let category = args.get("category").and_then(Value::as_str).map(str::trim).filter(|c| !c.is_empty());
    let items: Vec<Value> = skills
        .iter()
        .filter(|s| category.is_none_or(|c| s.category.eq_ignore_ascii_case(c)))
        .map(|s| json!({"name": s.name, "description": s.description, "category": s.category, "tags": s.tags}))
        .collect();
    json!({ "skills": items })
}

/// `skill_view`.
///
/// # Errors
/// No such skill here (the message lists the ones there are), or its file cannot be read.
pub fn view(skills: &[Skill], args: &Value) -> Result<String, ToolError> {
    let name = args
        .get("name")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ToolError::InvalidArgs("`name` is required".into()))?;
    let Some(skill) = skills.iter().find(|s| s.name == name) else {
        let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
        return Err(ToolError::InvalidArgs(format!(
            "no skill named `{name}` here; the skills are: {}",
            if names.is_empty() { "none".to_string() } else { names.join(", ") }
        )));
    };
    if let Some(file) = args.get("file").and_then(Value::as_str).filter(|f| !f.trim().is_empty()) {
        return crate::skills::read_file(skill, file.trim()).map_err(|e| ToolError::Failed(e.to_string()));
    }
    let files = skill.files();
    let mut text =
        format!("# Skill: {} ({})\n{}\n\n{}", skill.name, skill.category, skill.description, skill.body.trim());
    if !files.is_empty() {
        text.push_str(&format!("\n\nFiles (read one with skill_view and `file`): {}", files.join(", ")));
    }
    Ok(text)
}
