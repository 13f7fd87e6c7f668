fn main() {
    std::process::exit(gdrdoctor::app::main());
}
