//! Plugin API versions and kinds: 0.1.0 and 0.2.0 components side by side, exports checked
//! against the manifest, disabled plugins left alone.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use talaria_protocol::{HookDecision, HookEvent, ToolCallEvent, ToolError};
use talaria_runtime::{Kind, PluginError, PluginSettings, Runtime};
use talaria_test_support as support;

use crate::{Env, call, ok};

const HOOK: &str = "[hook]\nevents = [\"pre_tool_call\"]";

fn pre_tool_call(tool: &str) -> HookEvent {
    HookEvent::PreToolCall(ToolCallEvent {
        tool: tool.into(),
        plugin: String::new(),
        arguments: "{}".into(),
        call_id: "c1".into(),
    })
}

/// The error `prepare` gives for plugin `name`, without the "tool unavailable: plugin 'x' (dir): " head.
fn prepare_error(env: &Env, rt: &Runtime, name: &str) -> String {
    let plugin = rt.plugin(name).expect("plugin").clone();
    let e = rt.prepare(&plugin).expect_err("refused").to_string();
    let head =
        format!("tool unavailable: plugin '{name}' ({}): ", env.home.path().join("plugins").join(name).display());
    e.strip_prefix(&head).unwrap_or_else(|| panic!("{e}")).to_string()
}

#[tokio::test]
async fn a_legacy_0_1_0_plugin_runs_beside_0_2_0_plugins() {
    let env = Env::new();
    env.install("legacy", Path::new(support::LEGACY_V1_WASM), &support::manifest_v1("legacy", ""));
    env.install_v2("journal", support::PROBE_MEMORY_WASM, &["memory"], "[capabilities]\nkv = true")
        .grant("journal", &["kv"]);
    env.install_v2("guard", support::PROBE_HOOK_WASM, &["hook"], HOOK);
    env.evil("evil", "", &[]);
    let rt = env.runtime();
    let apis: Vec<(&str, String, Vec<String>)> =
        rt.plugins().iter().map(|p| (p.name(), p.manifest.api.to_string(), p.manifest.kinds.clone())).collect();
    assert_eq!(
        apis,
        [
            ("evil", "0.2.0".to_string(), vec!["tool".to_string()]),
            ("guard", "0.2.0".to_string(), vec!["hook".to_string()]),
            ("journal", "0.2.0".to_string(), vec!["memory".to_string()]),
            ("legacy", "0.1.0".to_string(), vec!["tool".to_string()]),
        ]
    );
    let (tools, problems) = rt.tools().await;
    assert!(problems.is_empty(), "{problems:?}");
    let owner = |name: &str| tools.iter().find(|t| t.name == name).map(|t| t.plugin.clone());
    assert_eq!(owner("legacy_echo").as_deref(), Some("legacy"));
    assert_eq!(owner("recall").as_deref(), Some("journal"), "a memory provider's tools are tools");
    assert!(tools.iter().all(|t| t.plugin != "guard"), "a hook plugin offers no tools");
    assert_eq!(ok(call(&rt, "legacy_echo", json!({ "text": "hi" })).await), "0.1.0: hi");
    assert_eq!(ok(call(&rt, "echo", json!({ "text": "sdk" })).await), "sdk");
    let guard = rt.plugin("guard").expect("guard").clone();
    assert_eq!(
        rt.hook(&guard, &pre_tool_call("ask"), &env.session()).await,
        Ok(HookDecision::RequireApproval("a human should look at this".into()))
    );
    let journal = rt.plugin("journal").expect("journal").clone();
    assert!(rt.memory_prefetch(&journal, "q", &env.session()).await.expect("recall").starts_with("call 1 in "));
    assert_eq!(ok(call(&rt, "legacy_echo", json!({ "text": "again" })).await), "0.1.0: again");
}

#[tokio::test]
async fn a_component_must_export_what_its_kinds_need() {
    let env = Env::new();
    env.install_v2("hook-as-tool", support::PROBE_HOOK_WASM, &["tool"], "");
    env.install_v2("memory-as-engine", support::PROBE_MEMORY_WASM, &["context-engine"], "");
    env.install_v2("memory-as-tool", support::PROBE_MEMORY_WASM, &["tool"], "");
    env.install_v2("hook-and-memory", support::PROBE_HOOK_WASM, &["hook", "memory"], HOOK);
    env.install("command", Path::new(support::NOT_A_TOOL_WASM), &support::manifest_v2("command", &["hook"], HOOK));
    let rt = env.runtime();
    assert_eq!(
        prepare_error(&env, &rt, "hook-as-tool"),
        "the component does not export talaria:plugin/tools@0.2.0: it exports talaria:plugin/hooks@0.2.0. It was built for another world; a tool plugin targets world `tool-plugin` (talaria-sdk's export_tools! does this)"
    );
    assert_eq!(
        prepare_error(&env, &rt, "memory-as-engine"),
        "the component does not export talaria:plugin/context@0.2.0: it exports talaria:plugin/memory@0.2.0, talaria:plugin/tools@0.2.0. It was built for another world; a context-engine plugin targets world `context-engine-plugin`"
    );
    assert_eq!(
        prepare_error(&env, &rt, "memory-as-tool"),
        "the component exports talaria:plugin/memory@0.2.0 but plugin.toml does not declare kind `memory` (it says kind = [\"tool\"]); add \"memory\" to `kind`, or build the component for world `tool-plugin`"
    );
    assert_eq!(
        prepare_error(&env, &rt, "hook-and-memory"),
        "the component does not export talaria:plugin/memory@0.2.0: it exports talaria:plugin/hooks@0.2.0. It was built for another world; a memory plugin targets world `memory-plugin`"
    );
    let e = prepare_error(&env, &rt, "command");
    assert!(
        e.starts_with("the component does not export talaria:plugin/hooks@0.2.0: it exports wasi:cli/run@0.2."),
        "{e}"
    );
    assert!(e.ends_with("a hook plugin targets world `hook-plugin`"), "{e}");
    // The kinds' own calls give the same reason, naming the plugin.
    let plugin = rt.plugin("command").expect("command").clone();
    let e = rt.hook(&plugin, &pre_tool_call("x"), &env.session()).await.expect_err("refused");
    assert!(matches!(e, PluginError::Unavailable(_)), "{e:?}");
    let e = e.to_string();
    assert!(e.starts_with("plugin 'command' ("), "{e}");
    assert!(e.contains("does not export talaria:plugin/hooks@0.2.0"), "{e}");
    // Tool plugins that do not fit are problems of the tool list; the others are not listed.
    let (_, problems) = rt.tools().await;
    let names: Vec<&str> = problems.iter().filter_map(|p| p.plugin.as_deref()).collect();
    assert_eq!(names, ["hook-and-memory", "hook-as-tool", "memory-as-tool"]);
}

#[tokio::test]
async fn a_component_of_one_api_is_never_taken_for_the_other() {
    let env = Env::new();
    let legacy_as_v2 = support::manifest("legacy", "");
    env.install("legacy", Path::new(support::LEGACY_V1_WASM), &legacy_as_v2);
    env.install("sdk", Path::new(support::EVIL_WASM), &support::manifest_v1("sdk", ""));
    let v2_as_legacy =
        support::manifest_v2("journal", &["tool", "memory"], "").replace("api = \"0.2.0\"", "api = \"0.1.0\"");
    env.install("journal", Path::new(support::PROBE_MEMORY_WASM), &v2_as_legacy);
    let rt = env.runtime();
    assert_eq!(
        prepare_error(&env, &rt, "legacy"),
        "plugin.toml says api = \"0.2.0\" but the component was built against API 0.1.0 (it exports talaria:plugin/tools@0.1.0); set api = \"0.1.0\" in plugin.toml or rebuild the component against API 0.2.0"
    );
    assert_eq!(
        prepare_error(&env, &rt, "sdk"),
        "plugin.toml says api = \"0.1.0\" but the component was built against API 0.2.0 (it exports talaria:plugin/tools@0.2.0); set api = \"0.2.0\" in plugin.toml or rebuild the component against API 0.1.0"
    );
    // A 0.1.0 manifest cannot even name the 0.2.0 kinds.
    let problem = rt.problems().iter().find(|p| p.location.contains("journal")).expect("journal refused").to_string();
    assert!(
        problem
            .ends_with("field `kind`: `memory` plugins need api 0.2.0 or later (this manifest says api = \"0.1.0\")"),
        "{problem}"
    );
    // And a 0.2.0 component behind a 0.1.0 manifest naming only `tool` is caught at its exports.
    let env = Env::new();
    let v2_tool_as_legacy =
        support::manifest_v2("journal", &["tool"], "").replace("api = \"0.2.0\"", "api = \"0.1.0\"");
    env.install("journal", Path::new(support::PROBE_MEMORY_WASM), &v2_tool_as_legacy);
    let rt = env.runtime();
    assert_eq!(
        prepare_error(&env, &rt, "journal"),
        "plugin.toml says api = \"0.1.0\" but the component was built against API 0.2.0 (it exports talaria:plugin/memory@0.2.0, talaria:plugin/tools@0.2.0); set api = \"0.2.0\" in plugin.toml or rebuild the component against API 0.1.0"
    );
}

#[tokio::test]
async fn a_disabled_plugin_is_listed_but_never_called() {
    let env = Env::new();
    env.install_v2("guard", support::PROBE_HOOK_WASM, &["hook"], &format!("enabled = false\n{HOOK}"));
    // Off and broken: were it ever compiled or called, there would be a problem to report.
    let garbage = env.home.path().join("garbage.wasm");
    std::fs::write(&garbage, b"\0asm not a component").expect("write");
    env.install("broken", &garbage, &format!("enabled = false\n{}", support::manifest("broken", "")));
    env.install("legacy", Path::new(support::LEGACY_V1_WASM), &support::manifest_v1("legacy", ""));
    let rt = env.runtime();
    assert!(rt.plugins_of_kind("hook").is_empty());
    assert_eq!(rt.disabled().iter().map(|p| p.name().to_string()).collect::<Vec<_>>(), ["broken", "guard"]);
    assert!(rt.plugin("guard").is_some_and(|p| !p.enabled), "listed, marked off");
    let (tools, problems) = rt.tools().await;
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["legacy_echo"]);
    let guard = rt.plugin("guard").expect("guard").clone();
    assert_eq!(
        rt.hook(&guard, &pre_tool_call("ask"), &env.session()).await,
        Err(PluginError::Unavailable(
            "plugin 'guard' is disabled; enable it with `enabled = true` under [plugins.guard] in config.toml".into()
        ))
    );
    let broken = rt.plugin("broken").expect("broken").clone();
    assert!(
        matches!(rt.call_plugin(&broken, &talaria_runtime::ToolContext::new("x", serde_json::json!({}))).await, Err(ToolError::Unavailable(m)) if m.contains("is disabled"))
    );
    assert!(!rt.needs_compile(&broken));

    // The operator turns it on (and another one off).
    let rt = env.runtime_with(|config| {
        config.plugins.insert("guard".into(), PluginSettings { enabled: Some(true), ..PluginSettings::default() });
        config.plugins.insert("legacy".into(), PluginSettings { enabled: Some(false), ..PluginSettings::default() });
    });
    assert_eq!(rt.plugins_of_kind("hook").iter().map(|p| p.name().to_string()).collect::<Vec<_>>(), ["guard"]);
    let guard = rt.plugin("guard").expect("guard").clone();
    assert_eq!(
        rt.hook(&guard, &pre_tool_call("context"), &env.session()).await,
        Ok(HookDecision::AddContext("remember the tests".into()))
    );
    assert!(rt.tools().await.0.is_empty(), "legacy is off now");
}

#[tokio::test]
async fn each_kind_has_its_default_deadline() {
    let env = Env::new();
    env.install_v2("journal", support::PROBE_MEMORY_WASM, &["memory"], "");
    env.install_v2("quick", support::PROBE_MEMORY_WASM, &["memory"], "[limits]\ntimeout_secs = 2");
    let rt = env.runtime();
    let journal = rt.plugin("journal").expect("journal");
    let secs = |kind| journal.limits_for(kind).timeout;
    assert_eq!(
        [secs(Kind::Tool), secs(Kind::Memory), secs(Kind::ContextEngine), secs(Kind::Hook)],
        [30, 30, 120, 10].map(Duration::from_secs)
    );
    let quick = rt.plugin("quick").expect("quick");
    assert!(Kind::ALL.iter().all(|k| quick.limits_for(*k).timeout == Duration::from_secs(2)));
    assert_eq!(rt.plugins_of_kind("memory").len(), 2);
    assert!(rt.plugins_of_kind("gadget").is_empty());
}

/// A bundled adapter's component, written out to install under other manifests.
fn adapter_wasm(env: &Env) -> std::path::PathBuf {
    let telegram = talaria_bundled::PLUGINS
        .iter()
        .find(|p| p.manifest.contains("name = \"telegram\""))
        .expect("the bundled telegram adapter");
    let path = env.home.path().join("telegram.wasm");
    std::fs::write(&path, telegram.wasm).expect("write");
    path
}

#[tokio::test]
async fn api_0_3_0_adds_adapters_and_keeps_every_0_2_0_component_loading() {
    let env = Env::new();
    let adapter = adapter_wasm(&env);
    let manifest = |name: &str, api: &str, kind: &str| {
        let hook = if kind == "hook" { HOOK } else { "" };
        format!("name = \"{name}\"\nversion = \"0.1.0\"\napi = \"{api}\"\nkind = [\"{kind}\"]\n{hook}\n")
    };
    env.install("adapter-as-tool", &adapter, &manifest("adapter-as-tool", "0.4.0", "tool"));
    env.install("adapter-at-0-3", &adapter, &manifest("adapter-at-0-3", "0.3.0", "platform"));
    env.install("adapter-at-0-2", &adapter, &manifest("adapter-at-0-2", "0.2.0", "tool"));
    env.install(
        "hook-as-platform",
        Path::new(support::PROBE_HOOK_WASM),
        &manifest("hook-as-platform", "0.3.0", "platform"),
    );
    env.install("hook-at-0-3", Path::new(support::PROBE_HOOK_WASM), &manifest("hook-at-0-3", "0.3.0", "hook"));
    env.install("adapter", &adapter, &manifest("adapter", "0.4.0", "platform"));
    let rt = env.runtime();
    assert_eq!(
        prepare_error(&env, &rt, "adapter-as-tool"),
        "the component does not export talaria:plugin/tools@0.2.0: it exports talaria:plugin/sender@0.4.0, talaria:plugin/adapter@0.3.0. It was built for another world; a tool plugin targets world `tool-plugin` (talaria-sdk's export_tools! does this)"
    );
    let e = prepare_error(&env, &rt, "adapter-at-0-2");
    assert!(
        e.starts_with("plugin.toml says api = \"0.2.0\" but the component was built against API 0.4.0 (it exports talaria:plugin/sender@0.4.0, talaria:plugin/adapter@0.3.0)"),
        "{e}"
    );
    // A 0.4.0 adapter (it exports `sender`) is not a 0.3.0 one.
    let e = prepare_error(&env, &rt, "adapter-at-0-3");
    assert!(e.starts_with("plugin.toml says api = \"0.3.0\" but the component was built against API 0.4.0"), "{e}");
    assert_eq!(
        prepare_error(&env, &rt, "hook-as-platform"),
        "the component does not export talaria:plugin/adapter@0.3.0: it exports talaria:plugin/hooks@0.2.0. It was built for another world; a platform plugin targets world `platform-plugin` (talaria-sdk's export_adapter! does this)"
    );
    // A 0.2.0 component is a 0.3.0 one: it loads and answers under either api.
    let hook = rt.plugin("hook-at-0-3").expect("hook").clone();
    assert!(rt.prepare(&hook).is_ok());
    let decision = rt.hook(&hook, &pre_tool_call("block_me"), &env.session()).await.expect("answered");
    assert!(matches!(decision, HookDecision::Block(_)), "{decision:?}");
    // The adapter itself loads as a platform plugin, and not as anything else.
    let adapter = rt.plugin("adapter").expect("adapter").clone();
    assert!(rt.prepare(&adapter).is_ok());
    assert!(adapter.is(Kind::Platform) && !adapter.is(Kind::Tool));
}
