output "bucket_name" {
  description = "Name of the bucket: REDRIVE_PAYLOAD_BUCKET of the consumers."
  value       = local.name
}

output "bucket_arn" {
  description = "ARN of the bucket."
  value       = local.arn
}

output "access_statements" {
  description = "The IAM statements each consumer's role needs, by consumer: GetObject anywhere in the bucket (producers' Extended Clients write at any key), ListBucket on the bucket (so that S3 answers 404, not 403, for a body that is gone), PutObject and DeleteObject under its own prefix only. Pass them in the consumer's extra_statements."
  value = { for key, prefix in var.writer_prefixes : key => [
    {
      sid       = "ReadLargeMessages"
      actions   = ["s3:GetObject"]
      resources = ["${local.arn}/*"]
    },
    # S3 answers 404 for an object that is gone only to a role that may list the bucket, and 403
    # otherwise, which reads as a refusal (Amazon S3 API reference, GetObject, "Permissions").
    {
      sid       = "TellMissingBodies"
      actions   = ["s3:ListBucket"]
      resources = [local.arn]
    },
    {
      sid       = "OffloadLargeMessages"
      actions   = ["s3:PutObject", "s3:DeleteObject"]
      resources = ["${local.arn}/${prefix}*"]
    },
  ] }
}
