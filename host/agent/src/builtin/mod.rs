//! Agent-level tools: their schemas are offered like any tool's, but calls are handled by the
//! loop itself because they need its state — the todo list, memory files, the session store,
//! child agents, the user, scheduled jobs.

pub mod cronjob;
pub mod delegate;
pub mod memory;
pub mod search;
pub mod skills;
pub mod todo;

use serde_json::{Value, json};
use talaria_protocol::{ToolAnnotations, ToolError, ToolSpec};

use crate::approval::Gate;

/// The plugin name agent-level tools report.
pub const PROVIDER: &str = "talaria";

/// Every agent-level tool's spec.
pub fn specs() -> Vec<ToolSpec> {
    let mut all = vec![
        todo::Todos::spec(),
        memory::Memory::spec(),
        search::spec(),
        delegate::spec(),
        clarify_spec(),
        cronjob::spec(),
    ];
    all.extend(skills::specs());
    all
}

pub(crate) fn clarify_spec() -> ToolSpec {
    ToolSpec {
        name: "clarify".into(),
        description: "Ask the user a question and wait for the answer. Use it only when you cannot \
                      proceed sensibly without their decision; offer choices when there are a few obvious ones."
            .into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "The question, self-contained."},
                "choices": {"type": "array", "items": {"type": "string"}, "maxItems": 6,
                            "description": "Suggested answers (the user may answer otherwise)."}
            },
            "required": ["question"],
            "additionalProperties": false
        }),
        plugin: PROVIDER.into(),
        // It waits for the user: never beside other calls.
        annotations: ToolAnnotations::default(),
    }
}

/// `clarify`: the user's answer, or an error telling the model to carry on without one.
///
/// # Errors
/// No question, or no one to answer.
pub async fn clarify(gate: &Gate, args: &Value) -> Result<Value, ToolError> {
    let question = args
        .get("question")
        .and_then(Value::as_str)
        .filter(|q| !q.trim().is_empty())
        .ok_or_else(|| ToolError::InvalidArgs("`question` is required".into()))?;
    let choices: Vec<String> = args
        .get("choices")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    if !gate.interactive() {
        return Err(ToolError::Failed(
            "no user is available to answer questions in this session; proceed with your best judgement and say what you assumed".into(),
        ));
    }
    match gate.ask_question(question, &choices).await {
        Some(answer) => Ok(json!({ "answer": answer })),
        None => Err(ToolError::Failed(
            "the user did not answer in time; proceed with your best judgement and say what you assumed".into(),
        )),
    }
}
