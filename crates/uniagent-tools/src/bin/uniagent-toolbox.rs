//! `uniagent-toolbox`: the multi-call binary that runs tools inside the sandbox.
//! See `uniagent_tools::toolbox` for the invocation format.

use std::io::Write as _;

fn main() {
    let argv: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let outcome = uniagent_tools::toolbox::run(
        &argv,
        &mut std::io::stdin().lock(),
        uniagent_tools::toolbox::state_dir_from_env(),
    );
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_all(outcome.output.as_bytes())
        .and_then(|()| stdout.flush());
    let code = if written.is_err() && outcome.exit_code == 0 {
        1
    } else {
        outcome.exit_code
    };
    std::process::exit(code);
}
