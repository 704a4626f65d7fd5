//! The parsed HCL of `infra/` and the contract rules checkov cannot express: the cross-resource
//! rules, read from the parsed files. The tests run each rule on the configuration and on a broken
//! copy of it, to show it can fail. References are module-local in Terraform, so each rule looks at
//! one module at a time.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hcl::{Block, Body, Expression};

pub mod rules;

/// The SQS consumer module's main file, which most broken copies change.
pub const CONSUMER: &str = "modules/sqs-consumer/main.tf";
/// The SQS consumer module's variables.
pub const CONSUMER_VARIABLES: &str = "modules/sqs-consumer/variables.tf";

/// The repository's root: `infra/`, `events/` and the workspace's `Cargo.toml` are read from it.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository holds tests/infra")
}

/// The Terraform configuration's root.
pub fn infra() -> PathBuf {
    repo_root().join("infra")
}

/// Every `.tf` file under `infra/`, as (path relative to `infra/`, text).
pub fn sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.ends_with(".terraform") {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "tf") {
                let relative = path.strip_prefix(infra()).unwrap().display().to_string();
                out.push((relative, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(&infra(), &mut out);
    out.sort();
    out
}

/// One Terraform module: the bodies of its files.
pub struct Module {
    pub dir: String,
    pub bodies: Vec<Body>,
}

impl Module {
    /// The text of the local a `local.<name>.<attribute>` reference reads (empty for anything else).
    pub fn local_of(&self, reference: &str) -> String {
        let Some(name) = reference.strip_prefix("local.") else {
            return String::new();
        };
        let name = name.split('.').next().unwrap_or_default();
        self.bodies
            .iter()
            .flat_map(|body| body.blocks())
            .filter(|block| block.identifier() == "locals")
            .flat_map(|block| block.body().attributes())
            .find(|attribute| attribute.key() == name)
            .map(|attribute| text(attribute.expr()))
            .unwrap_or_default()
    }

    pub fn blocks<'a>(&'a self, kind: &'a str, type_: &'a str) -> impl Iterator<Item = &'a Block> {
        self.bodies
            .iter()
            .flat_map(|body| body.blocks())
            .filter(move |block| {
                block.identifier() == kind
                    && block.labels().first().is_some_and(|l| l.as_str() == type_)
            })
    }

    /// `module` blocks whose source is the module directory `name`.
    pub fn calls<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Block> {
        self.bodies
            .iter()
            .flat_map(|body| body.blocks())
            .filter(move |block| {
                block.identifier() == "module"
                    && attr(block, "source").is_some_and(|s| s.ends_with(&format!("/{name}\"")))
            })
    }
}

/// `sources` parsed, grouped by module directory.
pub fn parse(sources: &[(String, String)]) -> Vec<Module> {
    let mut modules: BTreeMap<String, Vec<Body>> = BTreeMap::new();
    for (path, text) in sources {
        let dir = Path::new(path).parent().unwrap().display().to_string();
        let body = hcl::from_str(text).unwrap_or_else(|e| panic!("{path}: {e}"));
        modules.entry(dir).or_default().push(body);
    }
    modules
        .into_iter()
        .map(|(dir, bodies)| Module { dir, bodies })
        .collect()
}

/// `sources` with `from` replaced by `to` in the file whose path ends with `file`.
pub fn broken(file: &str, from: &str, to: &str) -> Vec<Module> {
    let mut copy = sources();
    // The file of that exact path if there is one (the root's `main.tf`), else the first ending so.
    let at = copy
        .iter()
        .position(|(path, _)| path == file)
        .or_else(|| copy.iter().position(|(path, _)| path.ends_with(file)))
        .expect("file");
    let text = &mut copy[at].1;
    assert!(text.contains(from), "{file} no longer contains {from:?}");
    *text = text.replacen(from, to, 1);
    parse(&copy)
}

/// A block's label at `index` (empty when it has none).
pub fn label(block: &Block, index: usize) -> &str {
    block.labels().get(index).map_or("", |l| l.as_str())
}

/// A block's attribute `name`, as HCL text.
pub fn attr(block: &Block, name: &str) -> Option<String> {
    block
        .body()
        .attributes()
        .find(|a| a.key() == name)
        .map(|a| text(a.expr()))
}

/// A block's first child block `name`.
pub fn child<'a>(block: &'a Block, name: &str) -> Option<&'a Block> {
    block.body().blocks().find(|b| b.identifier() == name)
}

/// The expression as HCL text, white space collapsed.
pub fn text(expr: &Expression) -> String {
    let formatted = hcl::format::to_string(expr).unwrap();
    formatted.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `path` with its `..` and `.` steps resolved (the paths are relative to `infra/`).
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
