output "function_name" {
  description = "Name of the function."
  value       = aws_lambda_function.function.function_name
}

output "function_arn" {
  description = "ARN of the function."
  value       = aws_lambda_function.function.arn
}

output "role_name" {
  description = "Name of the function's role."
  value       = aws_iam_role.function.name
}

output "log_group_name" {
  description = "Log group of the function."
  value       = aws_cloudwatch_log_group.function.name
}

output "role_arn" {
  description = "ARN of the function's role."
  value       = aws_iam_role.function.arn
}
