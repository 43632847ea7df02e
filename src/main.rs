//! The `natm` command: one binary, one subcommand per job (the code is the
//! `natm_cli` library, which the measurement lab `natm-lab` reuses).

fn main() -> std::process::ExitCode {
    natm_cli::main()
}
