# The shared idempotency store of a consumer (redrive::aws::DynamoDbStore): one item per key,
# on-demand, expired keys deleted by TTL, encrypted, recoverable to any point of the last 35 days.

resource "aws_dynamodb_table" "keys" {
  #checkov:skip=CKV_AWS_119:The items are message keys and their state, no payload; DynamoDB encrypts them at rest with its AWS-managed key, and a customer key would add cost and a key policy.
  name         = var.name
  billing_mode = "PAY_PER_REQUEST"
  hash_key     = "pk"

  attribute {
    name = "pk"
    type = "S"
  }

  ttl {
    attribute_name = "expires_at"
    enabled        = true
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled = true
  }

  tags = var.tags
}
