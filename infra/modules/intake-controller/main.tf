# The intake controller: consumers whose downstream stays down ask (REDRIVE_PAUSE_AFTER) on the
# requests queue; once a minute the controller disables their event source mappings, which stops
# Lambda polling ("pause invocation and resume later from the same location", Lambda API reference,
# UpdateEventSourceMapping), probes with one message, and enables them again step by step. Before it
# leaves a mapping below full it arms the mapping's switch: a one-time EventBridge Scheduler schedule
# whose universal target (arn:aws:scheduler:::aws-sdk:lambda:updateEventSourceMapping, Scheduler
# user guide, "Using universal targets") enables the mapping at full, and which each tick pushes
# forward. A controller that stops leaves the switch to fire: fail-open.

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}
data "aws_region" "current" {}

locals {
  # IAM names are global: the same stack in two regions needs two roles (modules/function).
  region_code  = replace(replace(replace(replace(replace(replace(replace(data.aws_region.current.region, "-", ""), "north", "n"), "south", "s"), "east", "e"), "west", "w"), "central", "c"), "gov", "g")
  mapping_arns = [for mapping in values(var.mappings) : mapping.arn]
  schedule_arn = "arn:${data.aws_partition.current.partition}:scheduler:${data.aws_region.current.region}:${data.aws_caller_identity.current.account_id}:schedule/${aws_scheduler_schedule_group.switches.name}"
}

# Pause requests: a consumer's request is worth a minute or two, never a backlog.
resource "aws_sqs_queue" "requests" {
  name = "${var.name}-intake-requests"
  # Every queue of the stack takes what redrive may send (SQS takes up to 1 MiB); the provider
  # creates 256 KiB queues unless told (AWS provider, aws_sqs_queue: max_message_size).
  max_message_size          = 1048576
  message_retention_seconds = 3600
  sqs_managed_sse_enabled   = true
  tags                      = var.tags
}

# Ticks that failed: the scheduler's DLQ and the function's on-failure destination.
resource "aws_sqs_queue" "failures" {
  name                      = "${var.name}-intake-failures"
  max_message_size          = 1048576
  message_retention_seconds = 1209600
  sqs_managed_sse_enabled   = true
  tags                      = var.tags
}

module "controller" {
  source = "../function"

  name               = "${var.name}-intake"
  description        = "Pauses consumers' event source mappings through their downstream's outage, probes once a minute (redrive)"
  zip                = var.zip
  timeout_seconds    = 60
  log_retention_days = var.log_retention_days
  # One tick at a time: two would probe twice and race on the switches.
  reserved_concurrency = 1
  environment = {
    INTAKE_MAPPINGS = jsonencode([for key, mapping in var.mappings : {
      uuid           = mapping.uuid
      queueUrl       = mapping.queue_url
      queueArn       = mapping.queue_arn
      function       = mapping.function_name
      maxConcurrency = mapping.max_concurrency
    }])
    INTAKE_REQUESTS_QUEUE_URL = aws_sqs_queue.requests.url
    INTAKE_RAMP               = join(",", [for step in var.ramp : tostring(step)])
    INTAKE_SWITCH_AFTER       = "${var.switch_after_seconds}s"
    INTAKE_SWITCH_GROUP       = aws_scheduler_schedule_group.switches.name
    INTAKE_SWITCH_ROLE_ARN    = aws_iam_role.switch.arn
    REDRIVE_METRICS_NAMESPACE = var.metrics_namespace
  }
  statements = [
    {
      sid       = "ReadPauseRequests"
      actions   = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"]
      resources = [aws_sqs_queue.requests.arn]
    },
    {
      sid       = "PauseAndResumeItsMappings"
      actions   = ["lambda:GetEventSourceMapping", "lambda:UpdateEventSourceMapping"]
      resources = local.mapping_arns
    },
    {
      sid       = "ProbeTheirQueues"
      actions   = ["sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:DeleteMessage"]
      resources = distinct([for mapping in values(var.mappings) : mapping.queue_arn])
    },
    {
      sid     = "ProbeTheirConsumers"
      actions = ["lambda:InvokeFunction"]
      # IAM matches a qualified invoke only against a qualified resource: a mapping may name a
      # version or an alias.
      resources = flatten([for arn in distinct([for mapping in values(var.mappings) : mapping.function_arn]) : [arn, "${arn}:*"]])
    },
    {
      sid       = "ArmTheSwitches"
      actions   = ["scheduler:CreateSchedule", "scheduler:UpdateSchedule", "scheduler:DeleteSchedule", "scheduler:GetSchedule"]
      resources = ["${local.schedule_arn}/*"]
    },
    {
      sid       = "HandTheSwitchItsRole"
      actions   = ["iam:PassRole"]
      resources = [aws_iam_role.switch.arn]
    },
  ]
  tags = var.tags
}

# The switches, one per paused mapping, in a group of their own, which the switch role's trust names.
resource "aws_scheduler_schedule_group" "switches" {
  name = "${var.name}-intake"
  tags = var.tags
}

data "aws_iam_policy_document" "switch_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["scheduler.amazonaws.com"]
    }
    # Confused deputy: only the switches (and the tick) of this group may take the role.
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = [aws_scheduler_schedule_group.switches.arn, "${local.schedule_arn}/*"]
    }
  }
}

# The role the switches and the tick run as: it may enable the named mappings and invoke the
# controller, nothing else.
resource "aws_iam_role" "switch" {
  name               = "${var.name}-intake-switch-${local.region_code}"
  assume_role_policy = data.aws_iam_policy_document.switch_assume.json

  lifecycle {
    create_before_destroy = true
  }
  tags = var.tags
}

data "aws_iam_policy_document" "switch" {
  statement {
    sid       = "EnableTheMappings"
    actions   = ["lambda:UpdateEventSourceMapping"]
    resources = local.mapping_arns
  }
  statement {
    sid       = "Tick"
    actions   = ["lambda:InvokeFunction"]
    resources = [module.controller.function_arn]
  }
  statement {
    sid       = "SchedulerDeadLetter"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.failures.arn]
  }
}

resource "aws_iam_role_policy" "switch" {
  name   = "${var.name}-intake-switch"
  role   = aws_iam_role.switch.id
  policy = data.aws_iam_policy_document.switch.json

  lifecycle {
    create_before_destroy = true
  }
}

# The controller's tick, once a minute.
resource "aws_scheduler_schedule" "tick" {
  #checkov:skip=CKV_AWS_297:The schedule has no input; Scheduler encrypts nothing secret with an AWS owned key.
  name                = "${var.name}-intake-tick"
  group_name          = aws_scheduler_schedule_group.switches.name
  description         = "Runs the intake controller once a minute."
  schedule_expression = "rate(1 minute)"

  flexible_time_window {
    mode = "OFF"
  }

  target {
    arn      = module.controller.function_arn
    role_arn = aws_iam_role.switch.arn

    retry_policy {
      maximum_retry_attempts       = 0
      maximum_event_age_in_seconds = 60
    }

    dead_letter_config {
      arn = aws_sqs_queue.failures.arn
    }
  }

  depends_on = [aws_iam_role_policy.switch]
}

resource "aws_lambda_function_event_invoke_config" "controller" {
  function_name          = module.controller.function_name
  maximum_retry_attempts = 0 # the next tick is the retry

  destination_config {
    on_failure {
      destination = aws_sqs_queue.failures.arn
    }
  }
}

module "failures_alarm" {
  source          = "../dlq-alarm"
  name            = "${var.name}-intake-failures"
  queue_name      = aws_sqs_queue.failures.name
  runbook         = "A tick of the intake controller failed: paused mappings are enabled again by their switch within switch_after_seconds. Runbook: docs/runbook.md, 'Intake paused'."
  alarm_topic_arn = var.alarm_topic_arn
  tags            = var.tags
}

resource "aws_cloudwatch_metric_alarm" "destination_delivery_failures" {
  alarm_name          = "${var.name}-intake-destination-delivery-failures"
  alarm_description   = "A failed tick of ${module.controller.function_name} could not be recorded in ${aws_sqs_queue.failures.name}. Runbook: docs/runbook.md, 'Asynchronous invocations lost'."
  namespace           = "AWS/Lambda"
  metric_name         = "DestinationDeliveryFailures"
  dimensions          = { FunctionName = module.controller.function_name }
  statistic           = "Sum"
  period              = 60
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]
  tags                = var.tags
}

# A mapping paused or ramping (the controller's EMF PausedMappings, every tick): a downstream is
# down, and the intake waits for it. OK again once every mapping runs at full; a period without a
# tick keeps the state (the failures alarm says why the ticks stopped).
resource "aws_cloudwatch_metric_alarm" "paused" {
  alarm_name          = "${var.name}-intake-paused"
  alarm_description   = "A consumer's event source mapping is paused: its downstream is down. Runbook: docs/runbook.md, 'Intake paused'."
  namespace           = var.metrics_namespace
  metric_name         = "PausedMappings"
  dimensions          = { Function = module.controller.function_name }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "ignore"
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]
  tags                = var.tags
}
