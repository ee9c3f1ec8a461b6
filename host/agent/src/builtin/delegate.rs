//! `delegate_task`: hand sub-tasks to child agents (reference §2). The loop runs them
//! ([`crate::Agent`]); this module parses the request and shapes each child's report.

use std::time::Duration;

use serde_json::{Value, json};
use talaria_protocol::{Outcome, ToolAnnotations, ToolError, ToolSpec, TurnEnd};

/// Most tasks in one call.
pub const MAX_TASKS: usize = 10;

/// One sub-task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub goal: String,
    pub context: Option<String>,
    pub toolsets: Option<Vec<String>>,
}

impl Task {
    /// The child's first (and only) user message.
    pub fn prompt(&self) -> String {
        let mut p = format!("Your task: {}", self.goal);
        if let Some(c) = &self.context {
            p.push_str("\n\nContext from the agent that delegated this to you:\n");
            p.push_str(c);
        }
        p.push_str(
            "\n\nWork on it with your tools, then reply with a concise report: what you found or did, \
             with the specifics (paths, values, commands) the other agent needs. You cannot ask the user questions.",
        );
        p
    }
}

pub fn spec() -> ToolSpec {
    let task = json!({
        "type": "object",
        "properties": {
            "goal": {"type": "string", "description": "What the child agent must achieve, self-contained."},
            "context": {"type": "string", "description": "Facts it needs: it starts with no history."},
            "toolsets": {"type": "array", "items": {"type": "string"},
                         "description": "Toolsets it may use (e.g. files, web, terminal); default: yours."}
        },
        "required": ["goal"],
        "additionalProperties": false
    });
    let mut props = task["properties"].clone();
    props["tasks"] = json!({
        "type": "array", "items": task, "maxItems": MAX_TASKS,
        "description": "Several independent tasks, run in parallel. Use instead of goal."
    });
    ToolSpec {
        name: "delegate_task".into(),
        description: "Give self-contained sub-tasks to child agents that work in parallel with their own tools \
                      and budget, and get back only their final reports. Good for independent research or \
                      edits that would flood your context. Children cannot ask the user, delegate, or write memory."
            .into(),
        parameters: json!({ "type": "object", "properties": props, "additionalProperties": false }),
        plugin: super::PROVIDER.into(),
        // It runs a whole agent: anything may happen.
        annotations: ToolAnnotations::default(),
    }
}

fn task_of(v: &Value) -> Result<Task, ToolError> {
    let goal = v
        .get("goal")
        .and_then(Value::as_str)
        .filter(|g| !g.trim().is_empty())
        .ok_or_else(|| ToolError::InvalidArgs("each task needs a non-empty `goal`".into()))?;
    let toolsets = v
        .get("toolsets")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect::<Vec<_>>());
    Ok(Task {
        goal: goal.to_string(),
        context: v.get("context").and_then(Value::as_str).map(str::to_string),
        toolsets: toolsets.filter(|t| !t.is_empty()),
    })
}

/// The tasks a call asks for: `tasks`, or one built from `goal`.
///
/// # Errors
/// Neither given, an empty goal, or too many tasks.
pub fn tasks(args: &Value) -> Result<Vec<Task>, ToolError> {
    let tasks = match args.get("tasks").and_then(Value::as_array) {
        Some(list) if !list.is_empty() => list.iter().map(task_of).collect::<Result<Vec<_>, _>>()?,
        _ if args.get("goal").is_some() => vec![task_of(args)?],
        _ => return Err(ToolError::InvalidArgs("give a `goal`, or `tasks` with a goal each".into())),
    };
    if tasks.len() > MAX_TASKS {
        return Err(ToolError::InvalidArgs(format!("at most {MAX_TASKS} tasks per call, got {}", tasks.len())));
    }
    Ok(tasks)
}

/// A child's report for the parent model.
pub fn report(i: usize, task: &Task, session: &str, end: &TurnEnd, took: Duration) -> Value {
    let status = match &end.outcome {
        Outcome::Failed(e) => format!("failed: {e}"),
        other => other.name().to_string(),
    };
    json!({
        "task": i + 1,
        "goal": task.goal,
        "status": status,
        "summary": end.text,
        "session_id": session,
        "model_calls": end.api_calls,
        "seconds": took.as_secs_f64().round(),
    })
}

/// A child that could not start.
pub fn failed(i: usize, task: &Task, error: &str) -> Value {
    json!({ "task": i + 1, "goal": task.goal, "status": format!("failed: {error}"), "summary": "" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_come_from_goal_or_list() {
        let one = tasks(&json!({"goal": "count files", "toolsets": ["files"]})).expect("one");
        assert_eq!(one, vec![Task { goal: "count files".into(), context: None, toolsets: Some(vec!["files".into()]) }]);
        let many = tasks(&json!({"tasks": [{"goal": "a"}, {"goal": "b", "context": "c"}]})).expect("many");
        assert_eq!(many.len(), 2);
        assert!(many[1].prompt().contains("Context from the agent"));
        assert!(tasks(&json!({})).expect_err("none").to_string().contains("give a `goal`"));
        assert!(tasks(&json!({"tasks": [{"goal": " "}]})).is_err());
        let eleven: Vec<Value> = (0..11).map(|i| json!({"goal": format!("g{i}")})).collect();
        assert!(tasks(&json!({ "tasks": eleven })).expect_err("too many").to_string().contains("at most 10"));
    }
}
