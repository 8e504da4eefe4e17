//! `keyflight-stack`: starts and stops a whole keyflight stack from the command line — the
//! one launcher (`keyflight_testkit::stack`) behind `make up`, `make down` and `make demo`.
//!
//! - `up`: starts a supervisor in the background that runs the stack (Postgres or, with
//!   `--ha`, etcd + two Patroni nodes; lease-store replicas; the demo upstream; Envoys), and
//!   returns once every part is ready, printing where each listens. What runs where is
//!   written to `DIR/stack.json` (ports, pids, logs, the filter's adapter, the database URL,
//!   the tokens); every part logs to `DIR/logs/<part>.log`, the supervisor to `DIR/stack.log`.
//! - `down`: stops the supervisor, which stops every part (Envoys first); removes `DIR`
//!   unless `--keep-logs`.
//! - `ctl COMMAND`: asks the running supervisor to act on a part, over its control socket
//!   (`DIR/control.sock`): `kill lease-store 0`, `start lease-store 0`, `kill envoy 1`,
//!   `start envoy 1`, `kill-primary` (with `--ha`: the primary's node dies and Patroni
//!   promotes the standby; the failover's timings are the answer), `rejoin-nodes`.
//! - `status`: prints `stack.json`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use keyflight_testkit::binaries::Binaries;
use keyflight_testkit::stack::{PortPlan, Stack, StackOptions};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::signal::unix::{SignalKind, signal};

/// How long `up` waits for the stack (a replicated Postgres takes the longest).
const START_TIMEOUT: Duration = Duration::from_secs(180);

/// How long `down` gives the supervisor to stop everything.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Parser)]
#[command(
    about = "Start and stop a whole keyflight stack (Postgres, lease-stores, upstream, Envoys)"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start the stack in the background and wait until it is ready.
    Up(StackArgs),
    /// Run the stack in the foreground (what `up` starts in the background).
    Run(StackArgs),
    /// Stop the stack `up` started.
    Down {
        /// The stack's directory.
        #[arg(long, default_value = ".run")]
        dir: PathBuf,
        /// Keep the directory (logs, configs) after stopping.
        #[arg(long)]
        keep_logs: bool,
    },
    /// Ask the running stack to act on a part (see the module doc).
    Ctl {
        /// The stack's directory.
        #[arg(long, default_value = ".run")]
        dir: PathBuf,
        /// The command, e.g. `kill lease-store 0`.
        #[arg(required = true)]
        words: Vec<String>,
    },
    /// Print what runs where (`stack.json`).
    Status {
        /// The stack's directory.
        #[arg(long, default_value = ".run")]
        dir: PathBuf,
    },
}

#[derive(clap::Args, Clone)]
struct StackArgs {
    /// Where the description, configs and logs go.
    #[arg(long, default_value = ".run")]
    dir: PathBuf,
    /// Envoy + lease-store replicas (the shipped configs run 1 or 2).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    replicas: u8,
    /// A replicated Postgres that fails over (etcd + two Patroni nodes; `make ha-prereqs`).
    #[arg(long)]
    ha: bool,
    /// The records on this many Postgres partitions behind a PL/Proxy router
    /// (`docs/distributed-sql.md`; `make partition-prereqs`); 0: one database.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=64))]
    partitions: u8,
    /// `shipped`: the ports `envoy/*.yaml` name (Envoy on :10000); `free`: any free ports.
    #[arg(long, value_enum, default_value_t = Ports::Shipped)]
    ports: Ports,
    /// Run the release builds (`target/release/…`) instead of the debug ones.
    #[arg(long)]
    release: bool,
    /// Every Envoy runs the native adapter (`envoy/native-demo.yaml`,
    /// `envoy/native-two-replicas.yaml`) from `KEYFLIGHT_NATIVE_DIR` instead of the Wasm filter.
    #[arg(long)]
    native: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum Ports {
    Shipped,
    Free,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Up(args) => up(&args).await,
        Cmd::Run(args) => run(args).await,
        Cmd::Down { dir, keep_logs } => down(&dir, keep_logs).await,
        Cmd::Ctl { dir, words } => ctl(&dir, &words.join(" ")).await,
        Cmd::Status { dir } => std::fs::read_to_string(description(&dir))
            .map(|text| print!("{text}"))
            .map_err(|e| format!("no stack runs from {} ({e}): make up first", dir.display())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("keyflight-stack: {message}");
            ExitCode::FAILURE
        }
    }
}

fn description(dir: &Path) -> PathBuf {
    dir.join("stack.json")
}

fn control_socket(dir: &Path) -> PathBuf {
    dir.join("control.sock")
}

/// Starts `run` detached, then waits until it wrote the description or died.
async fn up(args: &StackArgs) -> Result<(), String> {
    if control_socket(&args.dir).exists() && ctl(&args.dir, "ping").await.is_ok() {
        return Err(format!(
            "a stack already runs from {} (make down first)",
            args.dir.display()
        ));
    }
    // What an earlier crashed run may have left behind.
    let _ = std::fs::remove_dir_all(&args.dir);
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| format!("create {}: {e}", args.dir.display()))?;
    let log_path = args.dir.join("stack.log");
    let log = std::fs::File::create(&log_path)
        .map_err(|e| format!("create {}: {e}", log_path.display()))?;
    let log_err = log.try_clone().map_err(|e| e.to_string())?;
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut command = Command::new(me);
    command
        .arg("run")
        .arg("--dir")
        .arg(&args.dir)
        .arg("--replicas")
        .arg(args.replicas.to_string());
    command.arg("--ports").arg(match args.ports {
        Ports::Shipped => "shipped",
        Ports::Free => "free",
    });
    if args.ha {
        command.arg("--ha");
    }
    if args.partitions > 0 {
        command.arg("--partitions").arg(args.partitions.to_string());
    }
    if args.release {
        command.arg("--release");
    }
    if args.native {
        command.arg("--native");
    }
    // Its own process group: an interrupted `make` does not take the stack with it.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut supervisor = command
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log_err))
        .spawn()
        .map_err(|e| format!("start the supervisor: {e}"))?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(status)) = supervisor.try_wait() {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            return Err(format!("the stack did not start ({status}):\n{log}"));
        }
        if let Ok(text) = std::fs::read_to_string(description(&args.dir)) {
            print!("{}", summary(&text));
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the stack was not up after {START_TIMEOUT:?}; see {}",
                log_path.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs the stack in the foreground until `down` (or SIGTERM / SIGINT).
async fn run(args: StackArgs) -> Result<(), String> {
    let dir = std::path::absolute(&args.dir).map_err(|e| e.to_string())?;
    let mut options = StackOptions::default()
        .replicas(usize::from(args.replicas))
        .run_dir(&dir)
        .durable_postgres()
        .ports(match args.ports {
            Ports::Shipped => PortPlan::Shipped,
            Ports::Free => PortPlan::Free,
        });
    if args.ha && args.partitions > 0 {
        return Err("--ha and --partitions: a partition on Patroni is not built yet".to_owned());
    }
    if args.ha {
        options = options.replicated_postgres();
    }
    if args.partitions > 0 {
        options = options.partitioned(usize::from(args.partitions));
    }
    if args.release {
        options = options.binaries(Binaries::locate_profile("release"));
    }
    if args.native {
        options = options.native_adapter();
    }
    let mut terminate = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let socket = control_socket(&dir);
    let _ = std::fs::remove_file(&socket);
    let listener =
        UnixListener::bind(&socket).map_err(|e| format!("bind {}: {e}", socket.display()))?;

    let mut stack = Stack::start(options).await;
    write_description(&dir, &stack)?;
    println!("stack up: {}", description(&dir).display());
    let mut killed_nodes = Vec::new();
    loop {
        let mut connection = tokio::select! {
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
            accepted = listener.accept() => match accepted {
                Ok((connection, _)) => connection,
                Err(e) => return Err(format!("control socket: {e}")),
            },
        };
        let mut line = String::new();
        let mut reader = BufReader::new(&mut connection);
        if reader.read_line(&mut line).await.is_err() {
            continue;
        }
        let answer = match line.split_whitespace().collect::<Vec<_>>()[..] {
            ["ping"] => "pong".to_owned(),
            ["stop"] => {
                let _ = connection.write_all(b"stopping\n").await;
                break;
            }
            ["kill", part, index] => act(&mut stack, "kill", part, index).await,
            ["start", part, index] => act(&mut stack, "start", part, index).await,
            ["kill-primary"] => match stack.fail_primary_node().await {
                Some((node, window)) => {
                    killed_nodes.push(node);
                    format!(
                        "node {node} (the primary) died; the standby took over after {window:?}"
                    )
                }
                None => "not a replicated Postgres (make up HA=1)".to_owned(),
            },
            ["rejoin-nodes"] => {
                for &node in &killed_nodes {
                    stack.rejoin_node(node).await;
                }
                format!(
                    "nodes {:?} are back as standbys",
                    std::mem::take(&mut killed_nodes)
                )
            }
            _ => format!("unknown command `{}`", line.trim()),
        };
        write_description(&dir, &stack)?;
        println!("{}: {answer}", line.trim());
        let _ = connection.write_all(format!("{answer}\n").as_bytes()).await;
    }
    println!("stopping the stack");
    drop(stack);
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(description(&dir));
    Ok(())
}

/// `kill|start lease-store|envoy INDEX`.
async fn act(stack: &mut Stack, verb: &str, part: &str, index: &str) -> String {
    let Ok(index) = index.parse::<usize>() else {
        return format!("`{index}` is not a replica number");
    };
    if index >= stack.replicas() {
        return format!(
            "there is no replica {index}: the stack runs {}",
            stack.replicas()
        );
    }
    match (verb, part) {
        ("kill", "lease-store") => stack.kill_store(index),
        ("start", "lease-store") => stack.start_store(index).await,
        ("kill", "envoy") => stack.kill_envoy(index),
        ("start", "envoy") => stack.start_envoy(index).await,
        _ => return format!("no part `{part}` (lease-store or envoy)"),
    }
    format!("{part} {index}: {verb} done")
}

fn write_description(dir: &Path, stack: &Stack) -> Result<(), String> {
    let mut value = stack.describe();
    value["supervisor_pid"] = std::process::id().into();
    let text = serde_json::to_string_pretty(&value).map_err(|e| e.to_string())? + "\n";
    let path = description(dir);
    let staged = path.with_extension("json.new");
    std::fs::write(&staged, text).map_err(|e| format!("write {}: {e}", staged.display()))?;
    std::fs::rename(&staged, &path).map_err(|e| format!("write {}: {e}", path.display()))
}

/// Sends one command line to the supervisor and prints its answer.
async fn ctl(dir: &Path, command: &str) -> Result<(), String> {
    let socket = control_socket(dir);
    let mut stream = UnixStream::connect(&socket)
        .await
        .map_err(|e| format!("no stack runs from {} ({e}): make up first", dir.display()))?;
    stream
        .write_all(format!("{command}\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    BufReader::new(stream)
        .read_line(&mut answer)
        .await
        .map_err(|e| e.to_string())?;
    if command != "ping" {
        print!("{answer}");
    }
    Ok(())
}

/// Stops the supervisor (and with it every part); the pids in `stack.json` are the
/// fallback when the supervisor itself is gone.
async fn down(dir: &Path, keep_logs: bool) -> Result<(), String> {
    let described: Option<serde_json::Value> = std::fs::read_to_string(description(dir))
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok());
    if ctl(dir, "stop").await.is_ok()
        && let Some(pid) = described
            .as_ref()
            .and_then(|d| d["supervisor_pid"].as_u64())
    {
        let deadline = Instant::now() + STOP_TIMEOUT;
        while process_alive(pid) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    if let Some(described) = &described {
        for pid in leftover_pids(described) {
            if process_alive(pid) {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
    if !keep_logs {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok(())
}

/// Every process id the description names, supervisor first.
fn leftover_pids(described: &serde_json::Value) -> Vec<u64> {
    let parts = ["envoys", "lease_stores"]
        .iter()
        .flat_map(|list| described[*list].as_array().cloned().unwrap_or_default())
        .chain([described["upstream"].clone()]);
    std::iter::once(described["supervisor_pid"].as_u64())
        .chain(parts.map(|part| part["pid"].as_u64()))
        .flatten()
        .collect()
}

fn process_alive(pid: u64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The lines `up` prints: where to send requests, and where everything else is.
fn summary(description: &str) -> String {
    let Ok(d) = serde_json::from_str::<serde_json::Value>(description) else {
        return description.to_owned();
    };
    let mut out = String::from("keyflight stack is up:\n");
    for (index, envoy) in d["envoys"].as_array().into_iter().flatten().enumerate() {
        out += &format!(
            "  Envoy {index} (keyflight filter)  http://127.0.0.1:{}   admin http://127.0.0.1:{}\n",
            envoy["listener"], envoy["admin"]
        );
    }
    for (index, store) in d["lease_stores"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        out += &format!(
            "  lease-store {index}              http://127.0.0.1:{}   (/readyz, /metrics)   admin http://127.0.0.1:{}   (/console)\n",
            store["port"], store["admin"]
        );
    }
    out += &format!(
        "  demo upstream              http://127.0.0.1:{}   (/stats: how many payments really ran)\n",
        d["upstream"]["port"]
    );
    out += &format!(
        "  Postgres                   {}\n",
        d["postgres"]["url"].as_str().unwrap_or_default()
    );
    for (index, partition) in d["postgres"]["partitions"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        out += &format!(
            "    partition {index}              {}\n",
            partition.as_str().unwrap_or_default()
        );
    }
    out += &format!(
        "  tokens: filter {}, admin {}\n",
        d["tokens"]["filter"], d["tokens"]["admin"]
    );
    if let Some(listener) = d["envoys"][0]["listener"].as_u64() {
        out += &format!(
            "try: curl -i -X POST http://127.0.0.1:{listener}/payments -H 'x-user: alice' -H 'idempotency-key: k1' -d '{{\"amount\":100}}'\n"
        );
    }
    out += &format!(
        "Described in {}; stop with make down.\n",
        d["dir"]
            .as_str()
            .map_or(String::new(), |dir| format!("{dir}/stack.json"))
    );
    out
}
