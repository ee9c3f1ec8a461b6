//! The agent's own tools as handlers in the [`Registry`](super::Registry): each needs
//! the loop's state (the todo list, memory, the store, skills, the user, child agents), which
//! it reaches through the [`Scope`] the loop lends every call.

use std::sync::Arc;

use talaria_protocol::{ToolContext, ToolError, ToolSpec};

use super::registry::{Scope, ToolHandler};
use crate::builtin::{self, cronjob, delegate, memory::Memory, search, skills, todo::Todos};
use crate::tools::BoxFuture;

/// Every tool of the agent's own, with its handler, in [`builtin::specs`]' order: made once
/// per process and shared by every agent (the handlers keep no state; the specs never change).
pub(super) fn handlers() -> &'static [Own] {
    static OWN: std::sync::LazyLock<Vec<Own>> =
        std::sync::LazyLock::new(|| made().into_iter().map(|(spec, handler)| (Arc::new(spec), handler)).collect());
    &OWN
}

/// A tool of the agent's own and what runs it.
pub(super) type Own = (Arc<ToolSpec>, Arc<dyn ToolHandler>);

fn made() -> Vec<(ToolSpec, Arc<dyn ToolHandler>)> {
    let mut skills = skills::specs();
    let mut skill = |name: &str| {
        let at = skills.iter().position(|s| s.name == name).unwrap_or_default();
        skills.remove(at)
    };
    vec![
        (Todos::spec(), Arc::new(Todo)),
        (Memory::spec(), Arc::new(MemoryTool)),
        (search::spec(), Arc::new(SessionSearch)),
        (delegate::spec(), Arc::new(Delegate)),
        (builtin::clarify_spec(), Arc::new(Clarify)),
        (cronjob::spec(), Arc::new(Cronjob)),
        (skill(skills::LIST), Arc::new(SkillsList)),
        (skill(skills::VIEW), Arc::new(SkillView)),
        (skill(skills::MANAGE), Arc::new(SkillManage)),
    ]
}

/// A handler of the agent's own, written as the async body that runs a call.
macro_rules! own_tool {
    ($(#[$doc:meta])* $name:ident, |$agent:ident, $ctx:ident, $cancel:tt| $body:expr) => {
        $(#[$doc])*
        struct $name;

        impl ToolHandler for $name {
            fn call<'a>(&'a self, $ctx: &'a ToolContext, scope: Scope<'a>) -> BoxFuture<'a, Result<String, ToolError>> {
                Box::pin(async move {
                    let ($agent, $cancel) = (scope.agent, scope.cancel);
                    $body
                })
            }
        }
    };
}

own_tool!(
    /// `todo`: the session's task list.
    Todo,
    |agent, ctx, _| agent.todos.call(&ctx.arguments).map(|v| v.to_string())
);

own_tool!(
    /// `memory`: the owner's notes, unless this session serves a chat that does not share them.
    MemoryTool,
    |agent, ctx, _| {
        let shared = &agent.shared;
        if !shared.config.shared_memory {
            return Err(ToolError::Failed(
                "memory is off in this session: it serves a chat, and the owner's notes stay private (set [gateway] memory = true to share them)".into(),
            ));
        }
        let result = shared.memory.call(&ctx.arguments).map(|v| v.to_string());
        if result.is_ok() {
            agent.memory_written(&ctx.arguments);
        }
        result
    }
);

own_tool!(
    /// `session_search`: the store's full-text search over past sessions.
    SessionSearch,
    |agent, ctx, _| {
        let (store, current, args) = (agent.shared.store.clone(), agent.session_id.clone(), ctx.arguments.clone());
        search::call(&store, &current, &args).await.map(|v| v.to_string())
    }
);

own_tool!(
    /// `clarify`: a question for the user.
    Clarify,
    |agent, ctx, _| builtin::clarify(&agent.shared.gate, &ctx.arguments).await.map(|v| v.to_string())
);

own_tool!(
    /// `skills_list`.
    SkillsList,
    |agent, ctx, _| Ok(skills::list(&agent.skills, &ctx.arguments).to_string())
);

own_tool!(
    /// `skill_view`.
    SkillView,
    |agent, ctx, _| skills::view(&agent.skills, &ctx.arguments)
);

own_tool!(
    /// `skill_manage`: asked about when the skill is the user's.
    SkillManage,
    |agent, ctx, _| agent.manage_skill(ctx).await
);

own_tool!(
    /// `cronjob`: scheduled jobs in the store.
    Cronjob,
    |agent, ctx, _| {
        let shared = &agent.shared;
        cronjob::call(&shared.store, &shared.gate, &shared.config, &agent.tools, &ctx.arguments, &ctx.call_id)
            .await
            .map(|v| v.to_string())
    }
);

own_tool!(
    /// `delegate_task`: child agents.
    Delegate,
    |agent, ctx, cancel| agent.delegate(&ctx.arguments, cancel).await.map(|v| v.to_string())
);

#[cfg(test)]
mod tests {
    #[test]
    fn every_tool_of_the_agent_has_a_handler_in_the_order_of_its_specs() {
        let handled: Vec<String> = super::handlers().iter().map(|(s, _)| s.name.clone()).collect();
        let specs: Vec<String> = crate::builtin::specs().into_iter().map(|s| s.name).collect();
        assert_eq!(handled, specs);
    }
}
