//! The large message bucket's rules fail on broken copies of `infra/`.
use redrive_infra::broken;
use redrive_infra::rules::payloads::payload_buckets;

const BUCKET: &str = "modules/payload-bucket/main.tf";
const OUTPUTS: &str = "modules/payload-bucket/outputs.tf";

#[test]
fn a_bucket_open_to_the_public_or_to_plain_http_or_kept_forever_is_caught() {
    for (file, from, to, violation) in [
        (
            BUCKET,
            "restrict_public_buckets = true",
            "restrict_public_buckets = false",
            "public access not blocked on all four settings",
        ),
        (
            BUCKET,
            "Condition = { Bool = { \"aws:SecureTransport\" = \"false\" } }",
            "",
            "no bucket policy denying requests without TLS on the bucket and its objects",
        ),
        (
            BUCKET,
            "Resource  = [aws_s3_bucket.payloads[0].arn, \"${aws_s3_bucket.payloads[0].arn}/*\"]",
            "Resource  = [aws_s3_bucket.payloads[0].arn]",
            "no bucket policy denying requests without TLS on the bucket and its objects",
        ),
        (
            BUCKET,
            "expiration {\n      days = var.expire_after_days\n    }",
            "",
            "no lifecycle rule expiring objects no message points at",
        ),
        (
            BUCKET,
            "resource \"aws_s3_bucket_server_side_encryption_configuration\"",
            "resource \"aws_s3_bucket_accelerate_configuration\"",
            "no default encryption",
        ),
    ] {
        assert_eq!(
            payload_buckets(&broken(file, from, to)),
            [format!("modules/payload-bucket: payloads: {violation}")],
            "{from}"
        );
    }
}

#[test]
fn a_consumer_that_may_write_or_delete_outside_its_prefix_is_caught() {
    let anywhere = broken(
        OUTPUTS,
        "resources = [\"${local.arn}/${prefix}*\"]",
        "resources = [\"${local.arn}/*\"]",
    );
    assert_eq!(
        payload_buckets(&anywhere),
        ["modules/payload-bucket: output access_statements: puts or deletes objects outside the consumer's prefix"]
    );
}

/// Issue 53 item 7: a consumer granted GetObject but not ListBucket is told 403 for a body that
/// is gone, and dead-letters it as `payload_refused` (a permission to fix) instead of
/// `payload_missing`.
#[test]
fn a_consumer_that_reads_objects_without_listing_the_bucket_is_caught() {
    let unlisted = broken(OUTPUTS, "actions   = [\"s3:ListBucket\"]", "actions   = []");
    assert_eq!(
        payload_buckets(&unlisted),
        ["modules/payload-bucket: output access_statements: reads objects without s3:ListBucket on the bucket (a missing object answers 403, not 404)"]
    );
}
