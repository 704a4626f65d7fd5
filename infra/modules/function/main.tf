# One Lambda function as every redrive module deploys it: arm64 provided.al2023 from the
# cargo-lambda zip, JSON logs into its own log group, X-Ray, and a role with exactly the
# statements the caller passes, plus its log group and X-Ray.

resource "aws_cloudwatch_log_group" "function" {
  #checkov:skip=CKV_AWS_158:Lambda logs carry no secrets; a customer KMS key would add cost and a key policy to every log group.
  #checkov:skip=CKV_AWS_338:Retention is a validated input (log_retention_days); one year is not required for operational logs.
  name              = "/aws/lambda/${var.name}"
  retention_in_days = var.log_retention_days
  tags              = var.tags
}

data "aws_caller_identity" "current" {}

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
    # Confused deputy: only Lambda acting for this account may take the role.
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
  }
}

data "aws_region" "current" {}

locals {
  # IAM names are global: the same stack in two regions needs two roles. us-east-1 -> use1,
  # ap-southeast-4 -> apse4 (8 characters at most, so <name>-<code> fits IAM's 64).
  region_code = replace(replace(replace(replace(replace(replace(replace(data.aws_region.current.region, "-", ""), "north", "n"), "south", "s"), "east", "e"), "west", "w"), "central", "c"), "gov", "g")
}

resource "aws_iam_role" "function" {
  name               = "${var.name}-${local.region_code}"
  assume_role_policy = data.aws_iam_policy_document.assume.json
  tags               = var.tags

  # A renamed role (the region code, a new name_prefix) is made before the old one goes, so the
  # function is never left without one mid-apply (docs/deployment.md, "Upgrading").
  lifecycle {
    create_before_destroy = true
  }
}

# Least privilege: the caller names every queue, stream and function (no AWS managed policy).
data "aws_iam_policy_document" "function" {
  dynamic "statement" {
    for_each = var.statements
    content {
      sid       = statement.value.sid
      actions   = statement.value.actions
      resources = statement.value.resources
    }
  }
  statement {
    sid       = "Logs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.function.arn}:*"]
  }
  statement {
    # X-Ray's PutTraceSegments and PutTelemetryRecords support no resource-level permissions.
    sid       = "Tracing"
    actions   = ["xray:PutTraceSegments", "xray:PutTelemetryRecords"]
    resources = ["*"]
  }
}

resource "aws_iam_role_policy" "function" {
  name   = "${var.name}-function"
  role   = aws_iam_role.function.id
  policy = data.aws_iam_policy_document.function.json

  # Made on the new role before the old role goes (see the role).
  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_lambda_function" "function" {
  #checkov:skip=CKV_AWS_116:Failures are routed by the caller: SQS and Kinesis sources have their own DLQs, asynchronous callers an on-failure destination (aws_lambda_function_event_invoke_config).
  #checkov:skip=CKV_AWS_115:Capped where the callers are: SQS consumers by their mapping's maximum_concurrency, stream consumers by shards x parallelization_factor, the reprocessor by its schedule; an asynchronously invoked one may pass reserved_concurrency (modules/eventbridge-route's input, off by default: a reservation fails on accounts with a low concurrency quota).
  #checkov:skip=CKV_AWS_117:The functions only call SQS, Kinesis, Lambda, CloudWatch and X-Ray public endpoints; a VPC adds NAT cost and no protection here.
  #checkov:skip=CKV_AWS_272:Code signing needs a signing profile the deploying account may not have; zips come from the reviewed build.
  #checkov:skip=CKV_AWS_173:The environment holds queue URLs and retry settings, no secrets; AWS encrypts it at rest with its own key.
  function_name    = var.name
  description      = var.description
  role             = aws_iam_role.function.arn
  runtime          = "provided.al2023"
  architectures    = ["arm64"]
  handler          = "bootstrap"
  filename         = var.zip
  source_code_hash = filebase64sha256(var.zip)
  timeout          = var.timeout_seconds
  memory_size      = var.memory_mb
  # null leaves the function on the account's unreserved pool.
  reserved_concurrent_executions = var.reserved_concurrency
  tags                           = var.tags
  # On Managed Instances an unqualified invoke (the event source mapping's) runs $LATEST.PUBLISHED.
  publish_to = var.managed_instances == null ? null : "LATEST_PUBLISHED"

  dynamic "capacity_provider_config" {
    for_each = var.managed_instances == null ? [] : [var.managed_instances]
    content {
      lambda_managed_instances_capacity_provider_config {
        capacity_provider_arn                     = capacity_provider_config.value.capacity_provider_arn
        per_execution_environment_max_concurrency = capacity_provider_config.value.max_concurrency
        execution_environment_memory_gib_per_vcpu = capacity_provider_config.value.memory_gib_per_vcpu
      }
    }
  }

  environment {
    variables = var.environment
  }

  logging_config {
    log_format = "JSON"
    log_group  = aws_cloudwatch_log_group.function.name
  }

  tracing_config {
    mode = "Active"
  }

  depends_on = [aws_iam_role_policy.function]
}

# Lambda stops a chain SQS -> this function -> the same queue after 16 invocations from one
# triggering event (recursive loop detection). A consumer that re-sends to its own trigger (retries,
# hops past 900 s, deferrals) sets Allow and bounds every chain in its code instead.
resource "aws_lambda_function_recursion_config" "function" {
  function_name  = aws_lambda_function.function.function_name
  recursive_loop = var.recursive_loop
}
