fn main() -> std::process::ExitCode {
    moe_skills::cli::main()
}
