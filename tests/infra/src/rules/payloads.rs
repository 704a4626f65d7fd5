//! Large message buckets: private, encrypted, TLS only, emptied by a lifecycle rule, written by
//! each consumer under its own prefix only, and read by roles that S3 tells a missing object.
use crate::{attr, child, label, Module};

/// Every S3 bucket the modules make keeps its bodies from the public and from plain HTTP, and lets
/// no object outlive the messages that point at it; a consumer may put and delete only under its
/// own prefix (it deletes what it finds there once a message is done).
pub fn payload_buckets(modules: &[Module]) -> Vec<String> {
    let mut violations = Vec::new();
    for module in modules {
        for bucket in module.blocks("resource", "aws_s3_bucket") {
            let name = label(bucket, 1);
            let mut missing =
                |what: &str| violations.push(format!("{}: {name}: {what}", module.dir));
            let blocked = module
                .blocks("resource", "aws_s3_bucket_public_access_block")
                .any(|block| {
                    [
                        "block_public_acls",
                        "block_public_policy",
                        "ignore_public_acls",
                        "restrict_public_buckets",
                    ]
                    .iter()
                    .all(|setting| attr(block, setting).as_deref() == Some("true"))
                });
            if !blocked {
                missing("public access not blocked on all four settings");
            }
            if module
                .blocks(
                    "resource",
                    "aws_s3_bucket_server_side_encryption_configuration",
                )
                .next()
                .is_none()
            {
                missing("no default encryption");
            }
            let tls_only = module
                .blocks("resource", "aws_s3_bucket_policy")
                .any(|policy| {
                    let text = attr(policy, "policy").unwrap_or_default();
                    text.contains("\"Deny\"")
                        && text.contains("\"aws:SecureTransport\" = \"false\"")
                        && text.contains("/*\"")
                });
            if !tls_only {
                missing(
                    "no bucket policy denying requests without TLS on the bucket and its objects",
                );
            }
            let expires = module
                .blocks("resource", "aws_s3_bucket_lifecycle_configuration")
                .filter_map(|lifecycle| child(lifecycle, "rule"))
                .any(|rule| child(rule, "expiration").is_some());
            if !expires {
                missing("no lifecycle rule expiring objects no message points at");
            }
        }
        for output in module.bodies.iter().flat_map(|body| body.blocks()) {
            if output.identifier() != "output" {
                continue;
            }
            let value = attr(output, "value").unwrap_or_default();
            // Without s3:ListBucket on the bucket, S3 answers 403 for an object that is not
            // there, which the engine cannot tell from a refusal (payload_refused, not
            // payload_missing): Amazon S3 API reference, GetObject, "Permissions".
            let statements: Vec<&str> = value.split("sid =").skip(1).collect();
            let reads = statements.iter().any(|s| s.contains("s3:GetObject"));
            let lists = statements.iter().any(|s| {
                s.contains("s3:ListBucket")
                    && s.split("resources =")
                        .nth(1)
                        .is_some_and(|r| r.replace(' ', "").starts_with("[local.arn]"))
            });
            if reads && !lists {
                violations.push(format!(
                    "{}: output {}: reads objects without s3:ListBucket on the bucket (a missing object answers 403, not 404)",
                    module.dir,
                    label(output, 0)
                ));
            }
            for statement in statements {
                let writes = ["s3:PutObject", "s3:DeleteObject"]
                    .iter()
                    .any(|action| statement.contains(action));
                let resources = statement.split("resources =").nth(1).unwrap_or_default();
                if writes && !resources.contains("${prefix}*") {
                    violations.push(format!(
                        "{}: output {}: puts or deletes objects outside the consumer's prefix",
                        module.dir,
                        label(output, 0)
                    ));
                }
            }
        }
    }
    violations
}
