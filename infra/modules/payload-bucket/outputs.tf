output "bucket_name" {
  description = "Name of the bucket: REDRIVE_PAYLOAD_BUCKET of the consumers."
  value       = local.name
}

output "bucket_arn" {
  description = "ARN of the bucket."
  value       = local.arn
}

output "access_statements" {
  description = "The IAM statements each consumer's role needs, by consumer: GetObject anywhere in the bucket (producers' Extended Clients write at any key), PutObject and DeleteObject under its own prefix only. Pass them in the consumer's extra_statements."
  value = { for key, prefix in var.writer_prefixes : key => [
    {
      sid       = "ReadLargeMessages"
      actions   = ["s3:GetObject"]
      resources = ["${local.arn}/*"]
    },
    {
      sid       = "OffloadLargeMessages"
      actions   = ["s3:PutObject", "s3:DeleteObject"]
      resources = ["${local.arn}/${prefix}*"]
    },
  ] }
}
