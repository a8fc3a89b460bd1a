//! Server processes in tests and benchmarks: a free loopback port, the command line of a
//! sandbox server, and a child's first line of output (where servers print their address).

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};

/// A TCP port on 127.0.0.1 that was free a moment ago (bound, then released at once).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// `--host 127.0.0.1 --port <port> --auth-token <token>`: how deployments start a sandbox
/// server (`uniagent-sandbox`, `swerex-remote`).
pub fn sandbox_server_args(port: u16, token: &str) -> [String; 6] {
    let port = port.to_string();
    [
        "--host",
        "127.0.0.1",
        "--port",
        &port,
        "--auth-token",
        token,
    ]
    .map(str::to_owned)
}

/// Spawns `command` with its stdout piped and reads the first line the child prints (with its
/// line ending; empty when stdout closes first). The rest of stdout is dropped, so the child
/// must not depend on it being read.
///
/// # Panics
/// When the program cannot be started or its stdout cannot be read.
pub fn spawn_with_first_line(command: &mut Command) -> (Child, String) {
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", command.get_program()));
    let mut line = String::new();
    if let Some(stdout) = child.stdout.take() {
        BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap_or_else(|e| {
                panic!("reading the first line of {:?}: {e}", command.get_program())
            });
    }
    (child, line)
}
