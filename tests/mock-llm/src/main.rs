//! `talaria-mock-llm`: serve a script file or the auto rule until killed.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use talaria_mock_llm::{MockLlm, Mode, Script};

/// A scripted mock LLM server speaking OpenAI Chat Completions (/v1/chat/completions), Anthropic
/// Messages (/v1/messages) and OpenAI Responses (/v1/responses).
///
/// Prints `listening on http://127.0.0.1:PORT/v1` once it accepts connections.
#[derive(Debug, Parser)]
#[command(name = "talaria-mock-llm", version)]
struct Args {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// A JSON script: {"steps": [...], "repeat": bool, "auto": {...}} or a bare array of steps.
    #[arg(long, value_name = "FILE.json", conflicts_with = "auto")]
    script: Option<PathBuf>,
    /// Answer by the auto rule (the default without --script): "use NAME N times" in the last
    /// user message calls NAME until N tool results follow it, then says "done"; else "ok".
    #[arg(long)]
    auto: bool,
    /// The tool called when the prompt says "use the tool N times".
    #[arg(long, value_name = "NAME", default_value = "read_file", conflicts_with = "script")]
    tool: String,
    /// Arguments of every auto tool call, as JSON; `{n}` becomes the call number.
    #[arg(long, value_name = "JSON", default_value = "{}", conflicts_with = "script")]
    tool_args: String,
    /// Judge Chat Completions requests and shape streams as llama-cpp-python's server does.
    #[arg(long)]
    strict: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let script = match &args.script {
        Some(path) => match Script::load(path) {
            Ok(script) => script,
            Err(e) => {
                eprintln!("talaria-mock-llm: {e}");
                return ExitCode::from(2);
            }
        },
        None => match serde_json::from_str::<serde_json::Value>(&args.tool_args) {
            Ok(tool_args) => Script::auto().auto_tool(args.tool.clone(), tool_args),
            Err(e) => {
                eprintln!("talaria-mock-llm: --tool-args is not JSON: {e}");
                return ExitCode::from(2);
            }
        },
    };
    let mode = if args.strict { Mode::Strict } else { Mode::Normal };
    let mock = match MockLlm::bind_with(SocketAddr::from(([127, 0, 0, 1], args.port)), script, mode) {
        Ok(mock) => mock,
        Err(e) => {
            eprintln!("talaria-mock-llm: cannot listen on port {}: {e}", args.port);
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout();
    if writeln!(stdout, "listening on {}", mock.base_url()).and_then(|()| stdout.flush()).is_err() {
        return ExitCode::FAILURE;
    }
    loop {
        std::thread::park();
    }
}
