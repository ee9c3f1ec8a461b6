//! What the sandbox adds to a command: `sh -c true` in a kept sandbox against the same command
//! run unconfined, and what starting a sandbox costs. Prints p50 and p99 of each.
//!
//! `cargo bench -p talaria-sandbox --bench commands`

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use talaria_sandbox::proxy::{Gate, Refusal};
use talaria_sandbox::{Command, Launcher, Limits, Policy, Sandbox};

struct Nobody;

impl Gate for Nobody {
    fn admit<'a>(
        &'a self,
        host: &'a str,
        _port: u16,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<std::net::SocketAddr, Refusal>> + Send + 'a>> {
        Box::pin(async move { Err(Refusal::Denied(format!("{host}: no network in the benchmark"))) })
    }
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let at = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[at]
}

fn report(what: &str, samples: &mut [Duration]) -> (Duration, Duration) {
    let (p50, p99) = (percentile(samples, 0.50), percentile(samples, 0.99));
    println!("{what:<44} p50 {:>8.3} ms   p99 {:>8.3} ms   (n={})", ms(p50), ms(p99), samples.len());
    (p50, p99)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let launcher = match Launcher::find(None, PathBuf::from(env!("CARGO_BIN_EXE_talaria-sandbox-helper"))) {
            Ok(l) => l,
            Err(e) => return println!("skipped: {e}"),
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = dir.path().canonicalize().expect("canon");
        let policy = Policy {
            workspace: workspace.clone(),
            read: Vec::new(),
            write: Vec::new(),
            hidden: Vec::new(),
            home: std::env::var_os("HOME").map(PathBuf::from),
            scratch: Vec::new(),
            limits: Limits::default(),
        };
        let env = vec![("PATH".to_string(), "/usr/bin:/bin".to_string())];
        const N: usize = 300;

        let mut unconfined = Vec::with_capacity(N);
        for _ in 0..N {
            let started = Instant::now();
            let status = tokio::process::Command::new("sh")
                .args(["-c", "true"])
                .current_dir(&workspace)
                .env_clear()
                .envs(env.iter().cloned())
                .status()
                .await
                .expect("sh");
            assert!(status.success());
            unconfined.push(started.elapsed());
        }

        let mut starts = Vec::new();
        for _ in 0..20 {
            let started = Instant::now();
            let sandbox = Sandbox::start(&launcher, &policy, Arc::new(Nobody)).await.expect("sandbox");
            starts.push(started.elapsed());
            drop(sandbox);
        }

        let sandbox = Sandbox::start(&launcher, &policy, Arc::new(Nobody)).await.expect("sandbox");
        let mut confined = Vec::with_capacity(N);
        for _ in 0..N {
            let started = Instant::now();
            let mut child = sandbox
                .spawn(Command {
                    argv: vec!["sh".into(), "-c".into(), "true".into()],
                    cwd: workspace.clone(),
                    env: env.clone(),
                    stdin: false,
                })
                .expect("spawn");
            let exit = child.wait().await;
            assert_eq!(exit, talaria_sandbox::Exit::Code(0));
            confined.push(started.elapsed());
        }

        println!("sandbox cost per command (sh -c true), {} on {} cores", std::env::consts::ARCH, num_cpus());
        let (u50, u99) = report("unconfined: fork + exec", &mut unconfined);
        let (c50, c99) = report("confined, in a kept sandbox", &mut confined);
        report("starting a sandbox (bwrap + helper, once)", &mut starts);
        println!(
            "{:<44} p50 {:>8.3} ms   p99 {:>8.3} ms",
            "added by the sandbox",
            ms(c50.saturating_sub(u50)),
            ms(c99.saturating_sub(u99))
        );
    });
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}
