//! The AFL++ harness of every target: `tollgate-fuzz-afl <target>` (under `afl-fuzz`, or alone
//! with one input on standard input), and `tollgate-fuzz-afl seeds <dir>` to write the seed
//! corpora (`<dir>/<target>/<seed>`). Built by `scripts/fuzz` with `cargo afl build`.

use std::io::Write as _;
use std::path::Path;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["seeds", dir] => write_seeds(Path::new(dir)),
        ["list"] => {
            for t in tollgate_fuzz::TARGETS {
                println!("{:<18} {}", t.name, t.about);
            }
        }
        [name] => {
            let Some(target) = tollgate_fuzz::target(name) else {
                eprintln!("no fuzz target {name:?}; `list` names them");
                std::process::exit(2);
            };
            let check = target.check;
            afl::fuzz!(|data: &[u8]| check(data));
        }
        _ => {
            eprintln!("usage: tollgate-fuzz-afl <target> | list | seeds <dir>");
            std::process::exit(2);
        }
    }
}

fn write_seeds(dir: &Path) {
    for (target, name, bytes) in tollgate_fuzz::seeds::all() {
        let folder = dir.join(target);
        std::fs::create_dir_all(&folder).expect("the corpus folder can be made");
        let mut file = std::fs::File::create(folder.join(name)).expect("a seed file can be written");
        file.write_all(&bytes).expect("a seed file can be written");
    }
}
