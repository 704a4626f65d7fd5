//! Every argument and block name in `infra/` exists in the AWS provider's schema, as the CDK for
//! Terraform bindings publish it (`tools/provider-schema` fetches them; `make test` runs it first),
//! every required one is given, and every module tags what takes tags. `terraform validate` would
//! do most of this, but it needs the provider binary, which this machine cannot download. Each
//! binding's `*ToTerraform` functions list the snake_case names Terraform takes; its TypeScript
//! interfaces say which are required. Types and enumerations are not checked: Terraform converts
//! between strings, numbers and booleans, and the bindings carry no enumerations.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use hcl::{Block, Body, Structure};

const BINDINGS: &str = ".cache/cdktf-provider-aws-21.22.1/package/lib";
/// Terraform's own meta-arguments, valid on every resource.
const META: [&str; 7] = [
    "count",
    "for_each",
    "depends_on",
    "provider",
    "lifecycle",
    "provisioner",
    "connection",
];
/// The top-level names of a resource.
const TOP: &str = "synthesizeAttributes";

/// A resource's schema: for each struct, its names and the struct a name opens (blocks), and the
/// names it must be given.
struct Schema {
    structs: HashMap<String, Vec<(String, Option<String>)>>,
    required: HashMap<String, Vec<String>>,
}

impl Schema {
    fn load(kind: &str, type_: &str) -> Result<Self, String> {
        let name = type_.trim_start_matches("aws_").replace('_', "-");
        let dir = match kind {
            "data" => format!("data-aws-{name}"),
            _ => name,
        };
        let read = |file: &str| {
            let path = bindings().join(&dir).join(file);
            std::fs::read_to_string(&path).map_err(|error| {
                format!(
                    "{}: {error}; run `tools/provider-schema` (or `make infra-check`) to fetch the bindings",
                    path.display()
                )
            })
        };
        Ok(Self::parse(&read("index.js")?, &read("index.d.ts")?))
    }

    /// The names from the bindings' `*ToTerraform` functions (`index.js`), and which of them are
    /// required from their TypeScript interfaces (`index.d.ts`: a member without `?`).
    fn parse(source: &str, declarations: &str) -> Self {
        let optional_or_not = interface_members(declarations);
        let mut structs: HashMap<String, Vec<(String, Option<String>)>> = HashMap::new();
        let mut required: HashMap<String, Vec<String>> = HashMap::new();
        let mut current: Option<String> = None;
        let mut collecting = false;
        for line in source.lines() {
            let trimmed = line.trim();
            if let Some(rest) = trimmed.strip_prefix("function ") {
                current = rest
                    .strip_suffix("ToTerraform(struct) {")
                    .map(str::to_owned);
                collecting = false;
            } else if trimmed == "synthesizeAttributes() {" {
                current = Some(TOP.to_owned());
                collecting = false;
            } else if current.is_some() && trimmed == "return {" {
                collecting = true;
            } else if collecting && trimmed.starts_with("};") {
                collecting = false;
                current = None;
            } else if let (true, Some(name)) = (collecting, &current) {
                if let Some((key, value)) = trimmed.split_once(": ") {
                    structs
                        .entry(name.clone())
                        .or_default()
                        .push((key.to_owned(), child_struct(value)));
                    let interface = match name.as_str() {
                        TOP => optional_or_not.top.as_deref(),
                        nested => Some(nested),
                    };
                    let member = member_name(value);
                    let is_required = interface.zip(member).is_some_and(|(interface, member)| {
                        optional_or_not
                            .required
                            .get(&interface.to_ascii_lowercase())
                            .is_some_and(|members| members.contains(&member.to_owned()))
                    });
                    if is_required {
                        required
                            .entry(name.clone())
                            .or_default()
                            .push(key.to_owned());
                    }
                }
            }
        }
        Self { structs, required }
    }

    /// The names `body` uses that the schema does not know, and the required ones it leaves out,
    /// as dotted paths.
    fn unknown(&self, body: &Body, at: &str, path: &str, out: &mut Vec<String>) {
        let given: Vec<&str> = body
            .iter()
            .map(|structure| match structure {
                Structure::Attribute(attribute) => attribute.key.as_str(),
                Structure::Block(block) if block.identifier() == "dynamic" => {
                    block.labels()[0].as_str()
                }
                Structure::Block(block) => block.identifier(),
            })
            .collect();
        for required in self.required.get(at).map(Vec::as_slice).unwrap_or_default() {
            if !given.contains(&required.as_str()) {
                out.push(format!("{path}{required} (required, not given)"));
            }
        }
        let known = self.structs.get(at).map(Vec::as_slice).unwrap_or_default();
        let find = |name: &str| known.iter().find(|(key, _)| key == name);
        for structure in body.iter() {
            let (name, nested) = match structure {
                Structure::Attribute(attribute) => (attribute.key.as_str(), None),
                Structure::Block(block) if block.identifier() == "dynamic" => {
                    let content = block
                        .body()
                        .blocks()
                        .find(|b| b.identifier() == "content")
                        .map(Block::body);
                    (block.labels()[0].as_str(), content)
                }
                Structure::Block(block) => (block.identifier(), Some(block.body())),
            };
            if path.is_empty() && META.contains(&name) {
                continue;
            }
            match (find(name), nested) {
                (None, _) => out.push(format!("{path}{name}")),
                (Some((_, Some(child))), Some(nested)) => {
                    self.unknown(nested, child, &format!("{path}{name}."), out)
                }
                (Some((_, None)), Some(_)) => {
                    out.push(format!("{path}{name} (an argument, written as a block)"))
                }
                _ => {}
            }
        }
    }
}

/// The members of a binding's TypeScript interfaces that are required (no `?`), by interface
/// name in lower case, and the name of the resource's own `...Config` interface.
struct Interfaces {
    required: HashMap<String, Vec<String>>,
    top: Option<String>,
}

fn interface_members(declarations: &str) -> Interfaces {
    let mut required: HashMap<String, Vec<String>> = HashMap::new();
    let mut top = None;
    let mut current: Option<String> = None;
    for line in declarations.lines() {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("export interface ") {
            let name = rest
                .split(|c: char| !c.is_ascii_alphanumeric())
                .next()
                .unwrap_or_default()
                .to_owned();
            if rest.contains("extends cdktf.TerraformMetaArguments") {
                top = Some(name.to_ascii_lowercase());
            }
            current = Some(name.to_ascii_lowercase());
        } else if trimmed == "}" {
            current = None;
        } else if let (Some(interface), Some(member)) =
            (&current, trimmed.strip_prefix("readonly "))
        {
            if let Some((name, _)) = member.split_once(": ") {
                if !name.ends_with('?') {
                    required
                        .entry(interface.clone())
                        .or_default()
                        .push(name.to_owned());
                }
            }
        }
    }
    Interfaces { required, top }
}

/// The camelCase member a value converts: `cdktf.stringToTerraform(struct.alarmName)` or
/// `(this._alarmName)`.
fn member_name(value: &str) -> Option<&str> {
    let start = value
        .find("(struct.")
        .map(|i| i + "(struct.".len())
        .or_else(|| value.find("(this._").map(|i| i + "(this._".len()))?;
    let rest = &value[start..];
    let end = rest
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The struct function a value converts with: `fooBarToTerraform(` or `cdktf.listMapper(fooBarToTerraform, ...)`.
fn child_struct(value: &str) -> Option<String> {
    value.match_indices("ToTerraform").find_map(|(end, _)| {
        let start = value[..end]
            .rfind(|c: char| !c.is_ascii_alphanumeric())
            .map_or(0, |i| i + 1);
        let preceded_by_dot = start > 0 && value.as_bytes()[start - 1] == b'.';
        (!preceded_by_dot && start < end).then(|| value[start..end].to_owned())
    })
}

fn bindings() -> PathBuf {
    redrive_infra::repo_root().join(BINDINGS)
}

fn sources() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.ends_with(".terraform") {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "tf") {
                out.push((path.clone(), std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(&redrive_infra::repo_root().join("infra"), &mut out);
    out.sort();
    out
}

/// Visits every resource and data block of `sources` with its schema and the directory and file
/// it is in (`sqs-consumer`, `main.tf`).
fn each_block(
    sources: &[(PathBuf, String)],
    mut visit: impl FnMut(&str, &str, &Block, &Schema),
) -> Result<(), String> {
    let mut schemas: HashMap<(String, String), Schema> = HashMap::new();
    for (path, text) in sources {
        let body: Body = hcl::from_str(text).map_err(|e| format!("{}: {e}", path.display()))?;
        for block in body.blocks() {
            let kind = block.identifier();
            if !matches!(kind, "resource" | "data") {
                continue;
            }
            let type_ = block.labels()[0].as_str();
            let key = (kind.to_owned(), type_.to_owned());
            if !schemas.contains_key(&key) {
                schemas.insert(key.clone(), Schema::load(kind, type_)?);
            }
            let schema = &schemas[&key];
            if schema.structs.get(TOP).is_none_or(Vec::is_empty) {
                return Err(format!(
                    "no top-level names found for {type_}: the bindings' layout changed"
                ));
            }
            let file = path.file_name().unwrap().to_string_lossy();
            let module = path
                .parent()
                .unwrap()
                .file_name()
                .unwrap()
                .to_string_lossy();
            visit(&module, &file, block, schema);
        }
    }
    Ok(())
}

/// Every name in `sources` the provider's schema does not know, as `file: resource.name: path`.
fn violations(sources: &[(PathBuf, String)]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    each_block(sources, |module, file, block, schema| {
        let mut unknown = Vec::new();
        schema.unknown(block.body(), TOP, "", &mut unknown);
        let (type_, name) = (block.labels()[0].as_str(), block.labels()[1].as_str());
        out.extend(
            unknown
                .into_iter()
                .map(|path| format!("{module}/{file}: {type_}.{name}: {path}")),
        );
    })?;
    Ok(out)
}

/// The resources of a module (under `infra/modules/`) that take `tags` and are not given them:
/// the root's `default_tags` reach only the stack's own provider, and a team's stack that calls a
/// module with its tags expects them on everything the module makes.
fn untagged(sources: &[(PathBuf, String)]) -> Result<Vec<String>, String> {
    let in_modules: Vec<(PathBuf, String)> = sources
        .iter()
        .filter(|(path, _)| path.components().any(|c| c.as_os_str() == "modules"))
        .cloned()
        .collect();
    let mut out = Vec::new();
    each_block(&in_modules, |module, file, block, schema| {
        let takes_tags = schema.structs[TOP].iter().any(|(key, _)| key == "tags");
        let given = block.body().attributes().any(|a| a.key() == "tags");
        if block.identifier() == "resource" && takes_tags && !given {
            let (type_, name) = (block.labels()[0].as_str(), block.labels()[1].as_str());
            out.push(format!("{module}/{file}: {type_}.{name}: no tags"));
        }
    })?;
    Ok(out)
}

fn broken(file: &str, from: &str, to: &str) -> Vec<String> {
    let mut copy = sources();
    let (_, text) = copy
        .iter_mut()
        .find(|(path, _)| path.ends_with(file))
        .expect("file");
    assert!(text.contains(from), "{file} no longer contains {from:?}");
    *text = text.replacen(from, to, 1);
    violations(&copy).unwrap()
}

#[test]
fn every_argument_and_block_is_in_the_provider_schema() {
    let found = violations(&sources()).unwrap_or_else(|error| panic!("{error}"));
    assert!(
        found.is_empty(),
        "names the AWS provider does not know: {found:#?}"
    );
}

#[test]
fn a_misnamed_argument_or_block_is_caught_at_any_depth() {
    let top = broken(
        "modules/sqs-consumer/main.tf",
        "maximum_batching_window_in_seconds",
        "maximum_batching_window_seconds",
    );
    assert_eq!(
        top,
        ["sqs-consumer/main.tf: aws_lambda_event_source_mapping.consumer: maximum_batching_window_seconds"]
    );
    // The invoke config's on_failure takes `destination`; the event source mapping's takes `destination_arn`.
    let nested = broken(
        "modules/eventbridge-route/main.tf",
        "destination = aws_sqs_queue.consumer_failures_dlq.arn",
        "destination_arn = aws_sqs_queue.consumer_failures_dlq.arn",
    );
    assert_eq!(
        nested,
        [
            "eventbridge-route/main.tf: aws_lambda_function_event_invoke_config.consumer: destination_config.on_failure.destination (required, not given)",
            "eventbridge-route/main.tf: aws_lambda_function_event_invoke_config.consumer: destination_config.on_failure.destination_arn"
        ]
    );
    let dynamic = broken(
        "modules/function/main.tf",
        "      resources = statement.value.resources",
        "      resource = statement.value.resources",
    );
    assert_eq!(
        dynamic,
        ["function/main.tf: aws_iam_policy_document.function: statement.resource"]
    );
    let block_for_argument = broken(
        "modules/function/main.tf",
        "  timeout          = var.timeout_seconds\n",
        "  timeout {\n    seconds = var.timeout_seconds\n  }\n",
    );
    assert_eq!(
        block_for_argument,
        ["function/main.tf: aws_lambda_function.function: timeout (an argument, written as a block)"]
    );
}

#[test]
fn the_bindings_parse_into_nested_structs() {
    let schema = Schema::load("resource", "aws_lambda_event_source_mapping").unwrap();
    let top = &schema.structs[TOP];
    let scaling = top.iter().find(|(key, _)| key == "scaling_config").unwrap();
    assert_eq!(
        scaling.1.as_deref(),
        Some("lambdaEventSourceMappingScalingConfig")
    );
    assert!(schema.structs["lambdaEventSourceMappingScalingConfig"]
        .iter()
        .any(|(key, _)| key == "maximum_concurrency"));
}

/// Issue 43, item 9: every module takes `tags` and puts them on everything that takes them.
#[test]
fn every_taggable_resource_of_a_module_gets_its_tags() {
    let found = untagged(&sources()).unwrap_or_else(|error| panic!("{error}"));
    assert!(found.is_empty(), "{found:#?}");
}

/// Issue 43, item 9: an argument the provider requires, left out, fails at plan; the bindings'
/// interfaces say which are required, at any depth.
#[test]
fn a_required_argument_left_out_is_caught() {
    let top = broken(
        "modules/dlq-alarm/main.tf",
        "  comparison_operator = \"GreaterThanThreshold\"\n",
        "",
    );
    assert_eq!(
        top,
        ["dlq-alarm/main.tf: aws_cloudwatch_metric_alarm.dlq_depth: comparison_operator (required, not given)"]
    );
    let nested = broken(
        "modules/sqs-consumer/main.tf",
        "      stat        = \"Sum\"\n",
        "",
    );
    assert_eq!(
        nested,
        ["sqs-consumer/main.tf: aws_cloudwatch_metric_alarm.mapping_failed_invokes: metric_query.metric.stat (required, not given)"]
    );
}
