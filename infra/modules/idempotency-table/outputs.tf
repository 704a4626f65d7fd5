output "table_name" {
  description = "Name of the table: REDRIVE_IDEMPOTENCY_TABLE of the consumer."
  value       = aws_dynamodb_table.keys.name
}

output "table_arn" {
  description = "ARN of the table."
  value       = aws_dynamodb_table.keys.arn
}

output "access_statement" {
  description = "The IAM statement the consumer's role needs (the item actions the store and the FIFO attempt ledger use, on this table only): pass it in the consumer's extra_statements."
  value = {
    sid       = "IdempotencyStore"
    actions   = ["dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:DeleteItem", "dynamodb:UpdateItem", "dynamodb:BatchGetItem"]
    resources = [aws_dynamodb_table.keys.arn]
  }
}
