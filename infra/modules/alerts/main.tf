# Where alarms go (an encrypted SNS topic CloudWatch can publish to) and the dashboard.

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}
data "aws_region" "current" {}

# CloudWatch cannot publish to a topic encrypted with the AWS-managed alias/aws/sns key: the topic
# gets a customer key whose policy lets CloudWatch use it.
data "aws_iam_policy_document" "key" {
  #checkov:skip=CKV_AWS_111:A key policy's Resource "*" means this key only; the statements are scoped by principal and aws:SourceAccount.
  #checkov:skip=CKV_AWS_356:A key policy's Resource "*" means this key only.
  #checkov:skip=CKV_AWS_109:The account root must administer its own key (AWS's default key policy); no other principal gets permissions management.
  statement {
    sid       = "AccountAdministers"
    actions   = ["kms:*"]
    resources = ["*"] # in a key policy, "*" is this key
    principals {
      type        = "AWS"
      identifiers = ["arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root"]
    }
  }
  statement {
    sid       = "CloudWatchPublishes"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey*"]
    resources = ["*"] # in a key policy, "*" is this key
    principals {
      type        = "Service"
      identifiers = ["cloudwatch.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
    # Only this stack's alarms (they are all named <name>-...).
    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = [local.alarm_arns]
    }
  }
}

locals {
  alarm_arns = "arn:${data.aws_partition.current.partition}:cloudwatch:${data.aws_region.current.region}:${data.aws_caller_identity.current.account_id}:alarm:${var.name}-*"
}

resource "aws_kms_key" "alarms" {
  description             = "${var.name} alarm topic"
  enable_key_rotation     = true
  deletion_window_in_days = 30
  policy                  = data.aws_iam_policy_document.key.json
  tags                    = var.tags
}

resource "aws_kms_alias" "alarms" {
  name          = "alias/${var.name}-alarms"
  target_key_id = aws_kms_key.alarms.key_id
}

resource "aws_sns_topic" "alarms" {
  name              = "${var.name}-alarms"
  kms_master_key_id = aws_kms_key.alarms.arn
  tags              = var.tags
}

data "aws_iam_policy_document" "topic" {
  statement {
    sid       = "CloudWatchAlarmsPublish"
    actions   = ["sns:Publish"]
    resources = [aws_sns_topic.alarms.arn]
    principals {
      type        = "Service"
      identifiers = ["cloudwatch.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = [local.alarm_arns]
    }
  }
  statement {
    sid       = "DenyWithoutTls"
    effect    = "Deny"
    actions   = ["sns:*"]
    resources = [aws_sns_topic.alarms.arn]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_sns_topic_policy" "alarms" {
  arn    = aws_sns_topic.alarms.arn
  policy = data.aws_iam_policy_document.topic.json
}

resource "aws_sns_topic_subscription" "email" {
  count     = var.alarm_email == null ? 0 : 1
  topic_arn = aws_sns_topic.alarms.arn
  protocol  = "email"
  endpoint  = var.alarm_email
}

locals {
  region = data.aws_region.current.region
  widget = { type = "metric", width = 12, height = 6 }
  # A widget's metrics are a list of metric arrays, one per (consumer, metric) pair; flattened into
  # one list of strings they make a dashboard body CloudWatch refuses.
  metric_groups = {
    fates  = ["Done", "Retried", "DeadLettered", "Deferred", "GivenBack", "Held", "SentToLane"]
    errors = ["TransientErrors", "PermanentErrors", "Panics", "SendFailures"]
  }
  function_metrics = {
    for group, names in local.metric_groups : group => [
      for pair in setproduct(var.consumers[*].function_name, names) : [var.metrics_namespace, pair[1], "Function", pair[0]]
    ]
  }
  # Records done on a retry per record retried, per consumer: metric math over two hidden metrics.
  retry_success_metrics = concat([], [for i, name in var.consumers[*].function_name : [
    [var.metrics_namespace, "DoneAfterRetry", "Function", name, { id = "done${i}", visible = false }],
    [var.metrics_namespace, "Retried", "Function", name, { id = "retried${i}", visible = false }],
    [{ expression = "100 * done${i} / retried${i}", label = name, id = "rate${i}" }],
  ]]...)
  dashboard_widgets = [
    merge(local.widget, { properties = {
      title   = "DLQ depth (any message is an incident)", region = local.region, stat = "Maximum", period = 60
      metrics = [for c in var.consumers : ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", c.dlq_name]]
    } }),
    merge(local.widget, { properties = {
      title   = "Age of the oldest message (s)", region = local.region, stat = "Maximum", period = 60
      metrics = [for c in var.consumers : ["AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", c.queue_name]]
    } }),
    merge(local.widget, { properties = {
      title   = "Record fates", region = local.region, stat = "Sum", period = 60
      metrics = local.function_metrics.fates
    } }),
    merge(local.widget, { properties = {
      title   = "Error classes", region = local.region, stat = "Sum", period = 60
      metrics = local.function_metrics.errors
    } }),
    merge(local.widget, { properties = {
      title   = "Error types: shares over the hour", region = local.region, stat = "Sum", period = 3600, view = "pie"
      metrics = local.function_metrics.errors
    } }),
    merge(local.widget, { properties = {
      title   = "Retry success rate (%): records done on a retry per record retried, by the hour", region = local.region, stat = "Sum", period = 3600
      metrics = local.retry_success_metrics
    } }),
    merge(local.widget, { properties = {
      title   = "Retry delays (s)", region = local.region, stat = "Maximum", period = 60
      metrics = [for c in var.consumers : [var.metrics_namespace, "RetryDelayMaxSeconds", "Function", c.function_name]]
    } }),
    merge(local.widget, { properties = {
      title   = "Redrive outcomes (DLQ reprocessor, per DLQ)", region = local.region, stat = "Sum", period = 300
      metrics = [for pair in setproduct(var.consumers[*].dlq_name, ["Reprocessed", "Discarded", "ManualReview", "Alerted", "SendFailures"]) : [var.metrics_namespace, pair[1], "Source", pair[0]]]
    } }),
    merge(local.widget, { properties = {
      title   = "Function errors and throttles", region = local.region, stat = "Sum", period = 60
      metrics = [for pair in setproduct(var.consumers[*].function_name, ["Errors", "Throttles"]) : ["AWS/Lambda", pair[1], "FunctionName", pair[0]]]
    } }),
  ]
}

resource "aws_cloudwatch_dashboard" "redrive" {
  # Dashboards are global to the account: the region keeps two regions' stacks apart.
  dashboard_name = "${var.name}-redrive-${data.aws_region.current.region}"
  dashboard_body = jsonencode({ widgets = local.dashboard_widgets })
}
