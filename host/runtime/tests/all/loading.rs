//! Loading: broken plugins are reported clearly and never stop the others; the compile cache
//! never loads a file that does not match its recorded hash.

use std::path::Path;

use serde_json::json;
use talaria_runtime::{CacheOutcome, Runtime};
use talaria_test_support as support;

use crate::{Env, call, ok};

fn good_and(env: &Env) {
    env.evil("good", "", &[]);
}

async fn tool_names(rt: &Runtime) -> Vec<String> {
    rt.tools().await.0.into_iter().map(|t| format!("{}:{}", t.plugin, t.name)).collect()
}

#[tokio::test]
async fn a_malformed_wasm_is_reported_and_others_load() {
    let env = Env::new();
    good_and(&env);
    let bad = env.home.path().join("garbage.wasm");
    std::fs::write(&bad, b"\0asm this is not a component").expect("write");
    env.install("broken", &bad, &support::manifest("broken", ""));
    let rt = env.runtime();
    let (tools, problems) = rt.tools().await;
    assert!(tools.iter().any(|t| t.plugin == "good" && t.name == "echo"));
    assert_eq!(problems.len(), 1, "{problems:?}");
    let p = &problems[0];
    assert_eq!(p.plugin.as_deref(), Some("broken"));
    assert!(
        p.message.starts_with(&format!(
            "tool unavailable: plugin 'broken' ({}): not a valid WebAssembly component: ",
            env.home.path().join("plugins/broken").display()
        )),
        "{}",
        p.message
    );
    assert_eq!(ok(call(&rt, "echo", json!({ "text": "still works" })).await), "still works");
}

#[tokio::test]
async fn a_component_of_the_wrong_world_is_reported_and_others_load() {
    let env = Env::new();
    good_and(&env);
    env.install("command", Path::new(support::NOT_A_TOOL_WASM), &support::manifest("command", ""));
    let rt = env.runtime();
    let (tools, problems) = rt.tools().await;
    assert!(tools.iter().any(|t| t.plugin == "good"));
    assert_eq!(problems.len(), 1, "{problems:?}");
    let m = &problems[0].message;
    assert!(
        m.contains("the component does not export talaria:plugin/tools@0.2.0: it exports wasi:cli/run@0.2."),
        "{m}"
    );
    assert!(m.contains("a tool plugin targets world `tool-plugin`"), "{m}");
}

#[tokio::test]
async fn a_wrong_api_version_is_reported_and_others_load() {
    let env = Env::new();
    good_and(&env);
    let manifest = support::manifest("future", "").replace("api = \"0.2.0\"", "api = \"0.5.0\"");
    env.install("future", Path::new(support::EVIL_WASM), &manifest);
    let rt = env.runtime();
    assert_eq!(rt.plugins().iter().map(|p| p.name()).collect::<Vec<_>>(), ["good"]);
    let problems = rt.problems();
    assert_eq!(problems.len(), 1);
    assert_eq!(
        problems[0].to_string(),
        format!(
            "{}: field `api`: plugin API 0.5.0 is not supported: this talaria supports 0.1.0, 0.2.0, 0.3.0, 0.4.0 (rebuild the plugin against a matching talaria-sdk)",
            env.home.path().join("plugins/future/plugin.toml").display()
        )
    );
    assert_eq!(tool_names(&rt).await.len(), 25);
}

#[tokio::test]
async fn a_malformed_manifest_names_the_file_and_field() {
    let env = Env::new();
    good_and(&env);
    env.install("typo", Path::new(support::EVIL_WASM), &support::manifest("typo", "procss = true"));
    let missing = env.home.path().join("plugins/nowasm");
    std::fs::create_dir_all(&missing).expect("dir");
    std::fs::write(missing.join("plugin.toml"), support::manifest("nowasm", "")).expect("write");
    let rt = env.runtime();
    let problems: Vec<String> = rt.problems().iter().map(ToString::to_string).collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].starts_with(&format!("{}: field `wasm`: ", missing.join("plugin.toml").display())),
        "{}",
        problems[0]
    );
    assert!(
        problems[1].starts_with(&env.home.path().join("plugins/typo/plugin.toml").display().to_string()),
        "{}",
        problems[1]
    );
    assert!(problems[1].contains("unknown field `procss`"), "{}", problems[1]);
    assert_eq!(rt.plugins().len(), 1);
}

#[tokio::test]
async fn a_tampered_cache_file_is_recompiled_not_loaded() {
    let env = Env::new();
    good_and(&env);
    let cache = env.home.path().join("own-cache");
    let runtime = || {
        let mut config = env.config();
        config.cache_dir = Some(cache.clone());
        Runtime::new(config, &[]).expect("runtime")
    };
    let rt = runtime();
    let plugin = rt.plugin("good").expect("plugin").clone();
    assert_eq!(rt.prepare(&plugin).expect("compiles").map(|r| r.0), Some(CacheOutcome::Compiled));

    let rt = runtime();
    let plugin = rt.plugin("good").expect("plugin").clone();
    assert_eq!(rt.prepare(&plugin).expect("loads").map(|r| r.0), Some(CacheOutcome::Hit));

    let entry = std::fs::read_dir(&cache)
        .expect("cache dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .expect("a compiled entry");
    let mut bytes = std::fs::read(&entry).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&entry, &bytes).expect("tamper");

    let rt = runtime();
    let plugin = rt.plugin("good").expect("plugin").clone();
    assert_eq!(rt.prepare(&plugin).expect("recompiles").map(|r| r.0), Some(CacheOutcome::Replaced));
    assert_eq!(ok(call(&rt, "echo", json!({ "text": "sound" })).await), "sound");
    assert_ne!(std::fs::read(&entry).expect("read"), bytes, "the tampered file was replaced");
}

#[tokio::test]
async fn a_later_scope_shadows_an_earlier_plugin_by_name() {
    let env = Env::new();
    good_and(&env);
    let project = env.ws().join(".talaria/plugins/good");
    std::fs::create_dir_all(&project).expect("dir");
    std::fs::copy(support::EVIL_WASM, project.join("plugin.wasm")).expect("copy");
    std::fs::write(project.join("plugin.toml"), support::manifest("good", "")).expect("write");

    // Untrusted project: ignored, and said so.
    let rt = env.runtime();
    assert_eq!(rt.plugin("good").expect("good").scope.label(), "user");
    assert_eq!(rt.untrusted_project(), Some(env.ws().join(".talaria/plugins").as_path()));

    // Trusted, and the replacement of the user's plugin accepted (`talaria trust --replace good`).
    let mut grants = talaria_runtime::GrantFile::default();
    let survey = talaria_runtime::trust::survey(&[], env.home.path(), &env.ws());
    grants.set_project_pins(&env.ws(), survey.pins(&["good".to_string()]));
    grants.save(&env.home.path().join("grants.toml")).expect("save");
    let rt = env.runtime();
    assert_eq!(rt.plugin("good").expect("good").scope.label(), "project");
    let shadowed = rt.shadowed();
    assert_eq!(shadowed.len(), 1);
    assert_eq!(shadowed[0].hidden.label(), "user");
}
