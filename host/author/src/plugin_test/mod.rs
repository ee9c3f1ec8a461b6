//! `talaria plugin test [DIR]`: check a plugin project's built component against this talaria,
//! then run the cases of its `plugin-tests.toml` in the real sandbox, recording every host
//! import each call makes.
//!
//! 1. **Compatibility**: `plugin.toml` loads, the component it names exists, compiles (into the
//!    compile cache) and fits the manifest's `api` and `kind` with imports this host provides;
//!    its tools list. It is a warning, not a failure, when the component imports a host
//!    interface whose capability the manifest does not request (those calls would be denied).
//! 2. **Cases**: each `[[test]]` calls one tool in a fresh sandbox instance, with the plugin
//!    granted exactly what its manifest requests, as a user plugin of a throwaway
//!    `TALARIA_HOME`. `$WORKSPACE` is a fresh empty temporary directory (never the project
//!    itself, which a write-granted plugin could change); `kv` starts empty and carries over
//!    from case to case in file order. Secrets come from the environment and your
//!    `$TALARIA_HOME/.env`, sent only to the hosts the manifest names for them; commands pass
//!    your dangerous-command check (no `--yolo`) and, as ever, run as you: test only plugins
//!    you would grant what they request. Without `llm_reply` there is no model, so
//!    `llm.complete` fails saying so. Compiled code goes to your compile cache, so the next
//!    run (and `plugins install`) need not compile again.
//!
//! A relative DIR is taken from the workspace (`-C`, else the current directory). Progress and
//! warnings go to stderr; `--json` prints the whole report on stdout instead of the lines
//! below. Exit code 0 only when the component is compatible and every case passed.
//!
//! ```text
//! $ talaria plugin test
//! plugin hello 0.1.0 (/home/me/hello)
//! ok   compatible: API 0.2.0, kind tool; tools: hello; host imports: log, config
//! ok   hello {"name":"Ada"}  (1.2 ms)
//!        log info "greeting Ada"
//!        config.get greeting -> none
//! FAIL hello {"name":""}  (0.8 ms)
//!      expected an error containing "name", but the call succeeded: "Hello, !"
//!        log info "greeting "
//! 1 passed, 1 failed
//! ```
//!
//! `plugin-tests.toml`, one `[[test]]` per case:
//!
//! ```toml
//! [[test]]
//! tool = "hello"
//! args = { name = "Ada" }
//! expect_contains = "Hello, Ada"        # a substring of the output
//! # expect_equals = "Hello, Ada!"       # the whole output
//! # expect_json = { greeting = "..." }  # the output is JSON holding these keys and values
//! # expect_error = "name"               # the call fails, and its error contains this
//! # expect_imports = ["log", "kv.set"]  # recorded host imports starting with these were made
//! # config = { units = "metric" }       # [plugins.NAME.config] for this case
//! # llm_reply = "yes"                   # the model's answer to every llm.complete
//!
//! # [[test.http]]                       # canned answers: this case never reaches the network
//! # url = "https://api.example.com/v1/*"  # the whole URL, or a prefix ending in `*`
//! # method = "GET"                      # any method when absent
//! # status = 200                        # 200 when absent
//! # json = { temp_c = 21 }              # or body = "text"; headers = { "content-type" = "…" }
//! ```
//!
//! With `http` stubs a case's requests are still checked against the network grant, then
//! answered by the first matching stub; one that no stub matches is refused (and recorded).
//!
//! A case without any expectation passes when the call succeeds. An unknown key is an error
//! naming it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use owo_colors::OwoColorize as _;
use serde::Serialize;
use serde_json::Value;
use talaria_core::runtime::{
    BoxFuture, Capability, HttpStub, HttpStubs, LlmBackend, LlmCompletion, LlmRequest, Manifest, RecordedImport,
    Runtime,
};

use crate::{Place, ui};

mod cases;
mod kinds;

use cases::{Case, MAX_SHOWN, StubToml, Target, check, clip, load_cases};

/// The cases file, beside plugin.toml.
const TESTS_FILE: &str = "plugin-tests.toml";
/// Host interfaces whose calls are refused unless the manifest requests their capability:
/// (import name prefix, capability, what to add to plugin.toml).
const GATED_IMPORTS: &[(&str, &str, &str)] = &[
    ("talaria:plugin/kv@", "kv", "`kv = true`"),
    ("talaria:plugin/process@", "process", "`process = true`"),
    ("talaria:plugin/llm@", "llm", "`llm = true`"),
    ("talaria:plugin/secrets@", "secrets", "`secrets = [{ name = \"...\", host = \"...\" }]`"),
    ("wasi:http/outgoing-handler@", "network", "`network = [\"host\"]`"),
];

/// Run `talaria plugin test` on the project in `dir`.
///
/// # Errors
/// `plugin-tests.toml` cannot be read or has a bad case, or no temporary directory can be
/// made. A plugin that is not compatible, or a case that fails, is reported, not an error.
pub async fn run(ctx: &Place<'_>, dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    run_granted(ctx, dir, json, None).await
}

/// [`run`] with the plugin granted `granted` instead of everything its manifest requests
/// (`talaria plugin dev` tests it with what the user consented to).
///
/// # Errors
/// As [`run`].
pub async fn run_granted(
    ctx: &Place<'_>,
    dir: &Path,
    json: bool,
    granted: Option<&[Capability]>,
) -> anyhow::Result<ExitCode> {
    let out = Printer { json };
    let dir = ctx.workspace.join(dir);
    let dir = dir.canonicalize().unwrap_or(dir);
    let report = test_plugin(ctx, &dir, &out, granted).await?;
    out.summary(&report);
    Ok(if report.ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Check the plugin in `dir` and run its cases, printing each result as it comes.
async fn test_plugin(
    ctx: &Place<'_>,
    dir: &Path,
    out: &Printer,
    granted: Option<&[Capability]>,
) -> anyhow::Result<Report> {
    if !dir.join("plugin.toml").is_file() {
        anyhow::bail!(
            "{} has no plugin.toml: run this in a plugin project (`talaria plugin new` makes one)",
            dir.display()
        );
    }
    let cases = load_cases(&dir.join(TESTS_FILE))?;
    let scratch = Scratch::new()?;
    let mut report = Report::default();
    let prepared = prepare(ctx, dir, &scratch, &mut report, granted).await;
    out.header(&report, dir);
    out.compat(&report.compatibility);
    let Some((manifest, runtime)) = prepared else {
        report.not_run = cases.map_or(0, |c| c.len());
        return Ok(report);
    };
    if cases.is_none() && !out.json {
        ui::note(&format!("no {TESTS_FILE} in {}: only the compatibility check ran", dir.display()));
    }
    let mut current = Some((Group::default(), runtime));
    for (n, case) in cases.unwrap_or_default().into_iter().enumerate() {
        let group = Group { config: case.config.clone(), llm_reply: case.llm_reply.clone() };
        let runtime = match current.take() {
            Some((g, rt)) if g == group => rt,
            previous => {
                drop(previous);
                test_runtime(ctx, &scratch, &manifest.name, &group).await?
            }
        };
        let result = run_case(&runtime, &scratch, &manifest.name, n, case).await;
        out.case(&result);
        if result.passed {
            report.passed += 1;
        } else {
            report.failed += 1;
        }
        report.tests.push(result);
        current = Some((group, runtime));
    }
    Ok(report)
}

/// Load, compile and check the plugin, install it into the scratch home, list its tools, and
/// build the runtime for cases without `config`; the result of the check goes into `report`.
async fn prepare(
    ctx: &Place<'_>,
    dir: &Path,
    scratch: &Scratch,
    report: &mut Report,
    granted: Option<&[Capability]>,
) -> Option<(Manifest, Arc<Runtime>)> {
    let compat = &mut report.compatibility;
    let manifest = match Manifest::load(&dir.join("plugin.toml")) {
        Ok(m) => m,
        Err(e) => {
            compat.error = Some(e.to_string());
            return None;
        }
    };
    report.plugin = Some(manifest.name.clone());
    report.version = Some(manifest.version.to_string());
    compat.api = Some(manifest.api.to_string());
    compat.kinds = manifest.kinds.clone();
    let wasm = match std::fs::read(dir.join(&manifest.wasm)) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            compat.error = Some(format!("no {}: build it first with `talaria plugin build`", manifest.wasm));
            return None;
        }
        Err(e) => {
            compat.error = Some(format!("cannot read {}: {e}", dir.join(&manifest.wasm).display()));
            return None;
        }
    };
    if let Err(e) = scratch.install(dir, &manifest, &wasm, granted.unwrap_or(&manifest.requests)) {
        compat.error = Some(e);
        return None;
    }
    let runtime = match runtime(ctx, scratch, &manifest.name, &Group::default()) {
        Ok(rt) => rt,
        Err(e) => {
            compat.error = Some(format!("{e:#}"));
            return None;
        }
    };
    if let Some(p) = runtime.problems().first() {
        compat.error = Some(p.message.clone());
        return None;
    }
    if !runtime.is_compiled(&wasm) {
        eprintln!("compiling (first time; a JS or Python plugin takes ~10 s)…");
    }
    match runtime.check_component(&manifest, &wasm) {
        Ok(checked) => {
            if matches!(
                checked.outcome,
                talaria_core::runtime::CacheOutcome::Compiled | talaria_core::runtime::CacheOutcome::Replaced
            ) {
                compat.compiled_ms = Some(ms(checked.took));
            }
            compat.warnings = ungranted_imports(&checked.imports, &manifest.requests);
            compat.imports = checked.imports;
        }
        Err(e) => {
            compat.error = Some(e.to_string());
            return None;
        }
    }
    let (tools, problems) = runtime.tools().await;
    if let Some(p) = problems.first() {
        compat.error = Some(p.message.clone());
        return None;
    }
    compat.tools = tools.into_iter().map(|t| t.name.clone()).collect();
    // What listing the tools called is no case's doing.
    runtime.take_recorded_imports();
    compat.ok = true;
    Some((manifest, runtime))
}

/// The warnings for imports whose capability `requests` lacks.
fn ungranted_imports(imports: &[String], requests: &[Capability]) -> Vec<String> {
    let requested = |cap: &str| {
        requests.iter().any(|c| {
            matches!(
                (cap, c),
                ("kv", Capability::Kv)
                    | ("process", Capability::Process)
                    | ("llm", Capability::Llm)
                    | ("secrets", Capability::Secret { .. })
                    | ("network", Capability::Net(_))
            )
        })
    };
    let mut warnings = Vec::new();
    for (prefix, cap, add) in GATED_IMPORTS {
        if let Some(name) = imports.iter().find(|i| i.starts_with(prefix))
            && !requested(cap)
        {
            warnings.push(format!(
                "the component imports {name} but plugin.toml does not request {cap} (add {add} under [capabilities]): those calls will be refused"
            ));
        }
    }
    warnings
}

/// The host imports worth naming: talaria's interfaces (`types` only holds types) and
/// outgoing HTTP, by short name.
fn host_imports(imports: &[String]) -> Vec<String> {
    imports
        .iter()
        .filter_map(|i| {
            if let Some(rest) = i.strip_prefix("talaria:plugin/") {
                let iface = rest.split('@').next().unwrap_or(rest);
                (iface != "types").then(|| iface.to_string())
            } else if i.starts_with("wasi:http/outgoing-handler@") {
                Some("http".to_string())
            } else {
                None
            }
        })
        .collect()
}

/// What makes two cases need different runtimes.
#[derive(Debug, Clone, Default, PartialEq)]
struct Group {
    config: toml::Table,
    llm_reply: Option<String>,
}

/// A recording runtime over the scratch home, with `group`'s plugin config and model, and its
/// tools listed (so what listing records is not put on the first case).
async fn test_runtime(ctx: &Place<'_>, scratch: &Scratch, plugin: &str, group: &Group) -> anyhow::Result<Arc<Runtime>> {
    let runtime = runtime(ctx, scratch, plugin, group)?;
    runtime.tools().await;
    runtime.take_recorded_imports();
    Ok(runtime)
}

fn runtime(ctx: &Place<'_>, scratch: &Scratch, plugin: &str, group: &Group) -> anyhow::Result<Arc<Runtime>> {
    let plugin = talaria_core::ScratchPlugin {
        home: scratch.home(),
        workspace: scratch.workspace(),
        plugin: plugin.to_string(),
        config: group.config.clone(),
        stubs: scratch.stubs.clone(),
        llm: group.llm_reply.clone().map(|text| Arc::new(Canned { text }) as Arc<dyn LlmBackend>),
    };
    Ok(Arc::new(talaria_core::scratch_runtime(ctx.home, ctx.config, plugin)?))
}

/// A model that answers every completion with the same text.
struct Canned {
    text: String,
}

impl LlmBackend for Canned {
    fn complete<'a>(&'a self, _plugin: &'a str, _request: LlmRequest) -> BoxFuture<'a, Result<LlmCompletion, String>> {
        Box::pin(async move {
            Ok(LlmCompletion {
                text: self.text.clone(),
                model: "plugin-test".into(),
                input_tokens: 0,
                output_tokens: 0,
            })
        })
    }
}

/// Run case `n` and check it.
async fn run_case(runtime: &Arc<Runtime>, scratch: &Scratch, plugin: &str, n: usize, case: Case) -> CaseResult {
    let stubs: anyhow::Result<Vec<HttpStub>> = case.http.iter().map(StubToml::to_stub).collect();
    let target = case.target().unwrap_or(Target::Tool);
    let started = Instant::now();
    let (result, extra) = match stubs {
        Ok(stubs) => {
            scratch.stubs.set((!stubs.is_empty()).then_some(stubs));
            match runtime.plugin(plugin).cloned() {
                Some(p) if !p.is(target.kind()) => (Err(wrong_kind(&p, target)), Vec::new()),
                Some(p) => kinds::run(runtime, &p, scratch, n, &case, target).await,
                None => (Err(format!("plugin '{plugin}' did not load")), Vec::new()),
            }
        }
        Err(e) => (Err(format!("plugin-tests.toml: {e}")), Vec::new()),
    };
    scratch.stubs.set(None);
    let elapsed = started.elapsed();
    let imports = runtime.take_recorded_imports();
    let mut reasons = extra;
    reasons.extend(check(&case, &result, &imports));
    let (output, error) = match result {
        Ok(o) => (Some(o), None),
        Err(e) => (None, Some(e)),
    };
    CaseResult {
        kind: target.name(),
        label: case.label(),
        args: kinds::shown_input(&case, target),
        passed: reasons.is_empty(),
        reasons,
        output,
        error,
        elapsed_ms: ms(elapsed),
        imports: imports.into_iter().map(|i| Recorded { line: i.to_string(), import: i }).collect(),
    }
}

/// Why a case cannot run against this plugin: it is of another kind.
fn wrong_kind(plugin: &talaria_core::runtime::Plugin, target: Target) -> String {
    let kinds: Vec<&str> = plugin.kinds().iter().map(|k| k.name()).collect();
    format!(
        "this is a {} case, but plugin '{}' is {} (plugin.toml `kind`): change the case or the kind",
        target.name(),
        plugin.name(),
        kinds.join(", ")
    )
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// Everything a run found, as `--json` prints it.
#[derive(Debug, Default, Serialize)]
struct Report {
    plugin: Option<String>,
    version: Option<String>,
    compatibility: Compat,
    tests: Vec<CaseResult>,
    passed: usize,
    failed: usize,
    /// Cases not run because the component is not compatible.
    not_run: usize,
}

impl Report {
    fn ok(&self) -> bool {
        self.compatibility.ok && self.failed == 0 && self.not_run == 0
    }
}

/// The compatibility check.
#[derive(Debug, Default, Serialize)]
struct Compat {
    ok: bool,
    /// Why not, when not.
    error: Option<String>,
    api: Option<String>,
    kinds: Vec<String>,
    tools: Vec<String>,
    /// Every import of the component (WASI's too).
    imports: Vec<String>,
    warnings: Vec<String>,
    /// How long compiling took, when it was not cached.
    compiled_ms: Option<f64>,
}

/// One case's result.
#[derive(Debug, Serialize)]
struct CaseResult {
    /// What it exercised: tool, hook, memory, context or adapter.
    kind: &'static str,
    /// The tool, the event, or the call (prefetch, compress, webhook, ...).
    label: String,
    /// What went in, in short.
    args: Value,
    passed: bool,
    /// Why it failed.
    reasons: Vec<String>,
    output: Option<String>,
    error: Option<String>,
    elapsed_ms: f64,
    imports: Vec<Recorded>,
}

/// A recorded import and its line.
#[derive(Debug, Serialize)]
struct Recorded {
    line: String,
    #[serde(flatten)]
    import: RecordedImport,
}

/// Prints the report as it is made (text), or whole at the end (`--json`). Styles are dropped
/// when stdout is not a terminal or NO_COLOR is set (anstream).
struct Printer {
    json: bool,
}

impl Printer {
    fn header(&self, report: &Report, dir: &Path) {
        if self.json {
            return;
        }
        match (&report.plugin, &report.version) {
            (Some(name), Some(version)) => anstream::println!("plugin {} {version} ({})", name.bold(), dir.display()),
            _ => anstream::println!("plugin in {}", dir.display()),
        }
    }

    fn mark(&self, passed: bool) -> String {
        if passed { format!("{}", "ok  ".green().bold()) } else { format!("{}", "FAIL".red().bold()) }
    }

    fn compat(&self, c: &Compat) {
        if self.json {
            return;
        }
        if let Some(e) = &c.error {
            anstream::println!("{} compatibility: {e}", self.mark(false));
            return;
        }
        let kinds = c.kinds.join(", ");
        let imports = host_imports(&c.imports);
        let imports = if imports.is_empty() { "none".to_string() } else { imports.join(", ") };
        let tools = if c.tools.is_empty() { String::new() } else { format!("; tools: {}", c.tools.join(", ")) };
        let compiled = c.compiled_ms.map(|ms| format!(" (compiled in {:.1} s)", ms / 1000.0)).unwrap_or_default();
        anstream::println!(
            "{} compatible: API {}, kind {kinds}{tools}; host imports: {imports}{compiled}",
            self.mark(true),
            c.api.as_deref().unwrap_or("?"),
        );
        match c.warnings.as_slice() {
            [one] => ui::warn(one),
            [] => {}
            many => {
                // componentize-js and componentize-py import every interface of the world, used
                // or not: one line, not one per interface.
                let caps: Vec<&str> = many
                    .iter()
                    .filter_map(|w| w.split("does not request ").nth(1)?.split_whitespace().next())
                    .collect();
                ui::note(&format!(
                    "the component imports the {} interfaces but plugin.toml requests none of them: calls to them will be refused. \
                     That is expected if the code never makes them (JS and Python toolchains import every interface); \
                     otherwise request them under [capabilities]",
                    caps.join(", ")
                ));
            }
        }
    }

    fn case(&self, r: &CaseResult) {
        if self.json {
            return;
        }
        let took = if r.elapsed_ms < 1000.0 {
            format!("{:.1} ms", r.elapsed_ms)
        } else {
            format!("{:.2} s", r.elapsed_ms / 1000.0)
        };
        let args = clip(&r.args.to_string(), MAX_SHOWN);
        let label = if r.kind == "tool" { r.label.clone() } else { format!("{} {}", r.kind, r.label) };
        anstream::println!("{} {} {args}  ({took})", self.mark(r.passed), label.bold());
        for reason in &r.reasons {
            anstream::println!("     {reason}");
        }
        for i in &r.imports {
            anstream::println!("       {}", i.line.dimmed());
        }
    }

    fn summary(&self, report: &Report) {
        if self.json {
            match serde_json::to_string_pretty(report) {
                Ok(text) => println!("{text}"),
                Err(e) => ui::error(&format!("cannot write the report as JSON: {e}")),
            }
            return;
        }
        if !report.compatibility.ok {
            let not_run =
                if report.not_run > 0 { format!("{} not run: ", cases(report.not_run)) } else { String::new() };
            anstream::println!("{not_run}the component is not compatible");
            return;
        }
        let failed = format!("{} failed", report.failed);
        let failed = if report.failed > 0 { format!("{}", failed.red().bold()) } else { failed };
        anstream::println!("{} passed, {failed}", report.passed);
    }
}

fn cases(n: usize) -> String {
    if n == 1 { "1 test".into() } else { format!("{n} tests") }
}

/// A throwaway directory holding the test's `TALARIA_HOME` and `$WORKSPACE`, removed on drop.
struct Scratch {
    root: PathBuf,
    /// The canned HTTP answers of the case running.
    stubs: Arc<HttpStubs>,
}

impl Scratch {
    fn new() -> anyhow::Result<Self> {
        use std::os::unix::fs::DirBuilderExt as _;
        static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let root = std::env::temp_dir().join(format!("talaria-plugin-test-{}-{n}-{nanos}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&root)
            .with_context(|| format!("cannot create {}", root.display()))?;
        let root = root.canonicalize().with_context(|| format!("cannot resolve {}", root.display()))?;
        let scratch = Self { root, stubs: Arc::default() };
        for dir in [scratch.home(), scratch.workspace()] {
            std::fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        Ok(scratch)
    }

    fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    fn workspace(&self) -> PathBuf {
        self.root.join("workspace")
    }

    /// Put the plugin into the home as a user plugin, granted `granted`.
    fn install(&self, dir: &Path, manifest: &Manifest, wasm: &[u8], granted: &[Capability]) -> Result<(), String> {
        let target = self.home().join("plugins").join(&manifest.name);
        let wasm_path = target.join(&manifest.wasm);
        let manifest_text = std::fs::read_to_string(dir.join("plugin.toml")).map_err(|e| e.to_string())?;
        let granted: Vec<String> = granted.iter().map(ToString::to_string).collect();
        // [grants.user.NAME] granted = [...]
        let nest =
            |key: &str, value: toml::Value| toml::Value::Table(toml::Table::from_iter([(key.to_string(), value)]));
        let grants = nest("grants", nest("user", nest(&manifest.name, nest("granted", toml::Value::from(granted)))));
        let grants_text = toml::to_string(&grants).map_err(|e| e.to_string())?;
        let write = |path: &Path, bytes: &[u8]| -> Result<(), String> {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
            }
            std::fs::write(path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))
        };
        write(&target.join("plugin.toml"), manifest_text.as_bytes())?;
        write(&wasm_path, wasm)?;
        write(&self.home().join("grants.toml"), grants_text.as_bytes())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.root) {
            tracing::debug!("could not remove {}: {e}", self.root.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use talaria_core::ConfigToml;

    #[test]
    fn imports_without_their_capability_are_warned_about() {
        let imports: Vec<String> = [
            "wasi:io/streams@0.2.6",
            "talaria:plugin/types@0.2.0",
            "talaria:plugin/log@0.2.0",
            "talaria:plugin/kv@0.2.0",
            "talaria:plugin/process@0.2.0",
            "wasi:http/outgoing-handler@0.2.12",
        ]
        .map(String::from)
        .into();
        assert_eq!(host_imports(&imports), ["log", "kv", "process", "http"]);
        let requests = ["process".parse::<Capability>().expect("cap")];
        let warnings = ungranted_imports(&imports, &requests);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert_eq!(
            warnings[0],
            "the component imports talaria:plugin/kv@0.2.0 but plugin.toml does not request kv (add `kv = true` under [capabilities]): those calls will be refused"
        );
        assert!(warnings[1].starts_with(
            "the component imports wasi:http/outgoing-handler@0.2.12 but plugin.toml does not request network"
        ));
        let all = ["kv", "process", "net:example.com"].map(|c| c.parse::<Capability>().expect("cap"));
        assert!(ungranted_imports(&imports, &all).is_empty());
    }

    #[test]
    fn the_scratch_home_grants_what_the_manifest_requests() {
        let project = tempfile::tempdir().expect("project");
        let text = "name = \"hello\"\nversion = \"0.1.0\"\napi = \"0.2.0\"\nwasm = \"dist/hello.wasm\"\n[capabilities]\nkv = true\nnetwork = [\"api.example.com\"]\nfilesystem = [{ path = \"$WORKSPACE\", access = \"read\" }]\n";
        std::fs::write(project.path().join("plugin.toml"), text).expect("manifest");
        let manifest = Manifest::load(&project.path().join("plugin.toml")).expect("loads");
        let scratch = Scratch::new().expect("scratch");
        let root = scratch.root.clone();
        scratch.install(project.path(), &manifest, b"wasm", &manifest.requests).expect("installed");
        let grants = talaria_core::runtime::GrantFile::load(&scratch.home().join("grants.toml")).expect("grants");
        let granted = grants.recorded(&talaria_core::runtime::Scope::User, "hello").expect("granted");
        assert_eq!(granted, manifest.requests);
        assert_eq!(std::fs::read(scratch.home().join("plugins/hello/dist/hello.wasm")).expect("wasm"), b"wasm");
        drop(scratch);
        assert!(!root.exists(), "removed on drop");
    }

    /// A plugin project holding `wasm` with `manifest` and `tests`, and a context whose home
    /// shares one compile cache with the other tests.
    /// What a [`Place`] borrows.
    struct Owned {
        home: PathBuf,
        workspace: PathBuf,
        config: ConfigToml,
    }

    impl Owned {
        fn place(&self) -> Place<'_> {
            Place { home: &self.home, workspace: &self.workspace, config: &self.config }
        }
    }

    fn project(wasm: &str, manifest: &str, tests: Option<&str>) -> (tempfile::TempDir, Owned) {
        let dir = tempfile::tempdir().expect("project");
        std::fs::copy(wasm, dir.path().join("plugin.wasm")).expect("wasm");
        std::fs::write(dir.path().join("plugin.toml"), manifest).expect("manifest");
        if let Some(tests) = tests {
            std::fs::write(dir.path().join(TESTS_FILE), tests).expect("tests");
        }
        let home = std::env::temp_dir().join(format!("talaria-cli-plugin-test-home-{}", std::process::id()));
        std::fs::create_dir_all(&home).expect("home");
        let ctx = Owned { home, workspace: dir.path().to_path_buf(), config: ConfigToml::default() };
        (dir, ctx)
    }

    async fn report(ctx: &Owned) -> Report {
        test_plugin(&ctx.place(), &ctx.workspace, &Printer { json: true }, None).await.expect("ran")
    }

    #[tokio::test]
    async fn a_legacy_plugin_passes_and_fails_its_cases_with_imports_recorded() {
        use talaria_test_support as support;
        let tests = "[[test]]\ntool = \"legacy_echo\"\nargs = { text = \"hi\" }\nexpect_equals = \"0.1.0: hi\"\nexpect_imports = [\"log info\"]\n\n[[test]]\ntool = \"legacy_echo\"\nargs = { text = \"hi\" }\nexpect_contains = \"bye\"\n";
        let (_dir, ctx) = project(support::LEGACY_V1_WASM, &support::manifest_v1("legacy", ""), Some(tests));
        let report = report(&ctx).await;
        let c = &report.compatibility;
        assert!(c.ok, "{:?}", c.error);
        assert_eq!((c.api.as_deref(), c.tools.as_slice()), (Some("0.1.0"), &["legacy_echo".to_string()][..]));
        assert_eq!(host_imports(&c.imports), ["log"]);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!((report.passed, report.failed, report.ok()), (1, 1, false));
        let (first, second) = (&report.tests[0], &report.tests[1]);
        assert!(first.passed, "{:?}", first.reasons);
        assert_eq!(first.imports.len(), 1, "listing's imports are not put on the first case");
        assert!(first.imports[0].line.starts_with("log info \"echo in /"), "{}", first.imports[0].line);
        assert!(first.imports[0].line.contains("talaria-plugin-test-"), "$WORKSPACE is the scratch directory");
        assert_eq!(second.reasons, [r#"expected output containing "bye", got "0.1.0: hi""#]);
    }

    #[tokio::test]
    async fn an_ungranted_import_is_warned_about_and_refused() {
        use talaria_test_support as support;
        let tests = "[[test]]\ntool = \"kv_get\"\nargs = { name = \"x\" }\nexpect_error = \"not granted\"\nexpect_imports = [\"kv.get x -> denied\"]\n";
        let (_dir, ctx) = project(support::EVIL_WASM, &support::manifest("evil", "process = true"), Some(tests));
        let report = report(&ctx).await;
        let c = &report.compatibility;
        assert!(c.ok, "{:?}", c.error);
        assert_eq!(c.warnings.len(), 3, "kv, secrets, network: {:?}", c.warnings);
        assert_eq!((report.passed, report.failed), (1, 0), "{:?}", report.tests[0].reasons);
        assert!(report.ok());
    }

    #[tokio::test]
    async fn an_incompatible_or_missing_component_runs_no_case() {
        use talaria_test_support as support;
        let tests = "[[test]]\ntool = \"echo\"\nargs = { text = \"x\" }\n";
        let (dir, ctx) = project(support::EVIL_WASM, &support::manifest_v1("evil", ""), Some(tests));
        let mismatched = report(&ctx).await;
        let e = mismatched.compatibility.error.as_deref().unwrap_or_default();
        assert!(e.starts_with("plugin.toml says api = \"0.1.0\" but the component was built against API 0.2.0"), "{e}");
        assert_eq!((mismatched.not_run, mismatched.ok()), (1, false));

        std::fs::remove_file(dir.path().join("plugin.wasm")).expect("remove");
        let missing = report(&ctx).await;
        assert_eq!(
            missing.compatibility.error.as_deref(),
            Some("no plugin.wasm: build it first with `talaria plugin build`")
        );
        assert!(!missing.ok());
    }
}
