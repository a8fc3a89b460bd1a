//! `uniagent`: config-driven evaluation and training runs. See `uniagent --help`.

fn main() -> std::process::ExitCode {
    uniagent_cli::cli::main()
}
