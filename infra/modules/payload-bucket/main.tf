# The bucket of a stack's large messages (redrive::payload, feature s3): Extended Client pointers
# are read from it, and copies too large for their failure context are offloaded to it. Private,
# encrypted, TLS only, and emptied by a lifecycle rule of the objects no message points at any more.

locals {
  create = var.existing_bucket_name == null
  name   = local.create ? aws_s3_bucket.payloads[0].bucket : var.existing_bucket_name
  arn    = local.create ? aws_s3_bucket.payloads[0].arn : "arn:aws:s3:::${var.existing_bucket_name}"
}

resource "aws_s3_bucket" "payloads" {
  #checkov:skip=CKV_AWS_18:Access logs of transient message bodies would keep a record of every message in a second bucket; CloudTrail data events are the audit trail where one is wanted.
  #checkov:skip=CKV_AWS_21:Versioning would keep every deleted body until a second lifecycle rule: an object is deleted once its message is done, and is meant to be gone.
  #checkov:skip=CKV_AWS_144:The bodies live no longer than their messages, which SQS keeps in one region.
  #checkov:skip=CKV_AWS_145:SSE-S3: the Extended Clients and every consumer read with plain GetObject; a KMS key would need kms:Decrypt in each of their roles and a key policy.
  #checkov:skip=CKV2_AWS_62:Nothing reacts to a body's arrival: the message that points at it is the event.
  count = local.create ? 1 : 0

  # A bucket's name is unique across AWS: S3 completes the prefix.
  bucket_prefix = var.name_prefix
  tags          = var.tags
}

resource "aws_s3_bucket_public_access_block" "payloads" {
  count = local.create ? 1 : 0

  bucket                  = aws_s3_bucket.payloads[0].id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "payloads" {
  count = local.create ? 1 : 0

  bucket = aws_s3_bucket.payloads[0].id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "payloads" {
  count = local.create ? 1 : 0

  bucket = aws_s3_bucket.payloads[0].id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

# Requests without TLS are refused: a Deny on aws:SecureTransport = false over the bucket and its
# objects (AWS Knowledge Center, "s3-bucket-policy-for-config-rule": the s3-bucket-ssl-requests-only rule).
resource "aws_s3_bucket_policy" "payloads" {
  count = local.create ? 1 : 0

  bucket = aws_s3_bucket.payloads[0].id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "TlsOnly"
      Effect    = "Deny"
      Principal = "*"
      Action    = "s3:*"
      Resource  = [aws_s3_bucket.payloads[0].arn, "${aws_s3_bucket.payloads[0].arn}/*"]
      Condition = { Bool = { "aws:SecureTransport" = "false" } }
    }]
  })
  depends_on = [aws_s3_bucket_public_access_block.payloads]
}

# The backstop: redrive deletes its object when the message is done, but a message can also end
# where redrive does not see it (a queue's retention, a purge, a producer's message nobody
# deletes). expire_after_days outlasts every copy that may still point at an object.
resource "aws_s3_bucket_lifecycle_configuration" "payloads" {
  count = local.create ? 1 : 0

  bucket = aws_s3_bucket.payloads[0].id
  rule {
    id     = "expire-bodies-no-message-points-at"
    status = "Enabled"
    filter {}
    expiration {
      days = var.expire_after_days
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }
}
