variable "name" {
  description = "Name of the consumer: the function, `<name>` queue and `<name>-dlq` (with .fifo on FIFO)."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9-]{1,55}$", var.name))
    error_message = "name must be 1 to 55 letters, digits or hyphens: it names the function, whose role adds -function (IAM allows 64)."
  }
}

variable "fifo" {
  description = "FIFO source queue and DLQ (retries happen in place with ChangeMessageVisibility)."
  type        = bool
  default     = false
}

variable "function_zip" {
  description = "Path of the function's bootstrap.zip from `cargo lambda build --release --arm64 --output-format zip`."
  type        = string
}

variable "function_timeout_seconds" {
  description = "Function timeout."
  type        = number

  validation {
    condition     = var.function_timeout_seconds >= 1 && var.function_timeout_seconds <= 900
    error_message = "function_timeout_seconds must be between 1 and 900."
  }
}

variable "function_memory_mb" {
  description = "Function memory."
  type        = number
  default     = 256

  validation {
    condition     = var.function_memory_mb >= 128 && var.function_memory_mb <= 10240
    error_message = "function_memory_mb must be between 128 and 10240."
  }
}

variable "managed_instances" {
  description = "Run the consumer on Lambda Managed Instances: the capacity provider's ARN, the invocations one execution environment runs at once (Lambda passes it as AWS_LAMBDA_MAX_CONCURRENCY) and the memory per vCPU in GiB. null runs it on Lambda's default compute. Lambda fixes the compute type when it creates the function, so set it on the first apply."
  type = object({
    capacity_provider_arn = string
    max_concurrency       = optional(number)
    memory_gib_per_vcpu   = optional(number)
  })
  default = null

  validation {
    condition     = var.managed_instances == null || can(regex("^arn:aws[a-zA-Z-]*:lambda:[a-z0-9-]+:[0-9]{12}:capacity-provider:[a-zA-Z0-9_-]+$", var.managed_instances.capacity_provider_arn))
    error_message = "managed_instances.capacity_provider_arn must be a Lambda capacity provider ARN (arn:aws:lambda:<region>:<account>:capacity-provider:<name>)."
  }

  validation {
    condition     = try(var.managed_instances.max_concurrency, null) == null ? true : (var.managed_instances.max_concurrency >= 1 && var.managed_instances.max_concurrency <= 1600 && floor(var.managed_instances.max_concurrency) == var.managed_instances.max_concurrency)
    error_message = "managed_instances.max_concurrency must be a whole number from 1 to 1600."
  }

  validation {
    condition     = try(var.managed_instances.memory_gib_per_vcpu, null) == null ? true : contains([2, 4, 8], var.managed_instances.memory_gib_per_vcpu)
    error_message = "managed_instances.memory_gib_per_vcpu must be 2, 4 or 8 (GiB of memory per vCPU)."
  }

  # Lambda developer guide, best practices for Managed Instances: "The minimum supported function
  # size is 2GB and 1 vCPU"; at the memory-per-vCPU ratio, one vCPU takes that many GiB.
  validation {
    condition     = var.managed_instances == null || (var.function_memory_mb >= 2048 && var.function_memory_mb >= 1024 * coalesce(try(var.managed_instances.memory_gib_per_vcpu, null), 2))
    error_message = "on Lambda Managed Instances function_memory_mb must be at least 2048 (2 GB) and at least 1024 x managed_instances.memory_gib_per_vcpu (one vCPU at the ratio; 2 unless set)."
  }
}

variable "environment" {
  description = "REDRIVE_* (and other) environment variables of the function; REDRIVE_DLQ_URL is added. On FIFO, REDRIVE_DEFER_MAX_AGE is a whole number of s, m, h or d, at most message_retention_seconds less an hour."
  type        = map(string)
  nullable    = false
  default     = {}

  # On FIFO a deferral waits in place, and every wait in place ends an hour before the queue's
  # retention (the record is dead-lettered then, fate::RETENTION_MARGIN): a defer age past that
  # would be cut short at run time, so it is refused here.
  validation {
    condition = !var.fifo || !contains(keys(var.environment), "REDRIVE_DEFER_MAX_AGE") || try(
      tonumber(regex("^([0-9]+)[smhd]$", trimspace(var.environment["REDRIVE_DEFER_MAX_AGE"]))[0])
      * lookup({ s = 1, m = 60, h = 3600, d = 86400 }, substr(trimspace(var.environment["REDRIVE_DEFER_MAX_AGE"]), -1, 1), 0)
      <= var.message_retention_seconds - 3600,
      false
    )
    error_message = "On a FIFO queue REDRIVE_DEFER_MAX_AGE must be a whole number of s, m, h or d (such as 1h) and at most message_retention_seconds less an hour: a record deferred in place is dead-lettered an hour before the queue's retention would delete it."
  }
}

variable "kafka_lane" {
  description = "The queue is a Kafka consumer's retry lane (modules/kafka-consumer): the function gets REDRIVE_LANE_URL, its own queue, where a Kafka record that fails transiently goes. FIFO only."
  type        = bool
  default     = false
  nullable    = false

  validation {
    condition     = !var.kafka_lane || var.fifo
    error_message = "kafka_lane needs fifo = true: the lane keeps each key's records in order as a message group."
  }
}

variable "extra_statements" {
  description = "IAM statements the function needs beyond its queues (its downstream: a table, a bucket), each with actions and resources named."
  type = list(object({
    sid       = string
    actions   = list(string)
    resources = list(string)
  }))
  nullable = false
  default  = []
}

variable "max_attempts" {
  description = "REDRIVE_MAX_ATTEMPTS: deliveries a record gets in all."
  type        = number

  validation {
    condition     = var.max_attempts >= 1 && var.max_attempts <= 100
    error_message = "max_attempts must be between 1 and 100."
  }
}

variable "visibility_timeout_seconds" {
  description = "Source queue visibility timeout: at least 6 x the function timeout + the batching window."
  type        = number

  validation {
    # AWS: at least 6 x the function timeout (+ the batching window), or retries of a throttled batch overlap.
    condition     = var.visibility_timeout_seconds >= 6 * var.function_timeout_seconds + var.batching_window_seconds && var.visibility_timeout_seconds <= 43200
    error_message = "visibility_timeout_seconds must be at least 6 x function_timeout_seconds + batching_window_seconds, and at most 43200."
  }
}

variable "message_retention_seconds" {
  description = "Source queue retention."
  type        = number
  default     = 345600

  validation {
    condition     = var.message_retention_seconds >= 60 && var.message_retention_seconds <= 1209600
    error_message = "message_retention_seconds must be between 60 and 1209600 (14 days)."
  }
}

variable "dlq_message_retention_seconds" {
  description = "DLQ retention. On a standard queue longer than the source's: a message SQS moves keeps its original enqueue time, which the DLQ's retention counts from; a FIFO DLQ counts from the move (SQS developer guide, \"Setting-up dead-letter queue retention\")."
  type        = number
  default     = 1209600

  validation {
    condition     = (var.fifo || var.dlq_message_retention_seconds > var.message_retention_seconds) && var.dlq_message_retention_seconds >= 60 && var.dlq_message_retention_seconds <= 1209600
    error_message = "dlq_message_retention_seconds must be 60 to 1209600 and, on a standard queue, longer than message_retention_seconds: SQS keeps a moved message's original enqueue time, so a shorter DLQ retention deletes it sooner than it seems."
  }
}

variable "max_receive_count" {
  description = "Redrive policy: receives before SQS moves a message to the DLQ itself (the last net)."
  type        = number
  default     = 10

  validation {
    condition     = var.max_receive_count >= 5 && var.max_receive_count <= 1000 && var.max_receive_count > var.max_attempts
    error_message = "max_receive_count must be 5 to 1000 and above max_attempts."
  }
  # On FIFO in batches, a record's receive count also rises while it is held back behind each
  # record ahead of it in its batch (each tried up to max_attempts times, and ending its deferrals
  # once), and while its group waits out an outage: deferrals in place double from the breaker's
  # open time (1 s at least) up to REDRIVE_DEFER_MAX_AGE (14 d at most), 21 receives at most. SQS's
  # own move must catch only crash loops, so the count has to stay above all of that.
  validation {
    condition     = !var.fifo || var.batch_size == 1 || var.max_receive_count >= var.batch_size * (var.max_attempts + 1) + 21
    error_message = "On FIFO with batch_size above 1, max_receive_count must be at least batch_size x (max_attempts + 1) + 21: a record is received again while held back behind each record ahead of it in its batch and while its group waits out an outage, and SQS's own move must only catch crash loops."
  }
  # A held head comes back after each wait in place (11 h 40 min), for as long as the queue
  # keeps it (14 d at most): 29 receives more.
  validation {
    condition     = var.fifo_on_dead_letter != "hold" || var.max_receive_count >= var.batch_size * (var.max_attempts + 1) + 21 + 30
    error_message = "With fifo_on_dead_letter = \"hold\", max_receive_count must be at least batch_size x (max_attempts + 1) + 51: a held head comes back every 11 h 40 min while it holds its group."
  }
}

variable "fifo_on_dead_letter" {
  description = "FIFO: what a head that would be dead-lettered means for its group (REDRIVE_FIFO_ON_DEAD_LETTER). continue: it goes to the DLQ and the group goes on. hold: it holds its group, which waits in order until an operator runs `dlq release` (alarmed: Held), in a retry lane made here (<name>-held.fifo, REDRIVE_LANE_URL) with the group's later records, so that the source's other groups go on; needs the attempt ledger, and holds at most message_retention_seconds less a day."
  type        = string
  default     = "continue"
  nullable    = false

  validation {
    condition     = contains(["continue", "hold"], var.fifo_on_dead_letter)
    error_message = "fifo_on_dead_letter is continue or hold."
  }
  validation {
    condition     = var.fifo_on_dead_letter == "continue" || (var.fifo && var.message_retention_seconds >= 2 * 86400 && length(setintersection(keys(var.environment), ["REDRIVE_IDEMPOTENCY_TABLE", "REDRIVE_LEDGER_TABLE"])) > 0)
    error_message = "fifo_on_dead_letter = \"hold\" is for FIFO queues with the attempt ledger (REDRIVE_LEDGER_TABLE or REDRIVE_IDEMPOTENCY_TABLE in environment) and a message_retention_seconds of at least two days: a hold ends a day before the retention would drop the group."
  }
}

variable "batch_size" {
  description = "Event source mapping batch size."
  type        = number
  default     = 10

  validation {
    condition     = var.batch_size >= 1 && var.batch_size <= (var.fifo ? 10 : 10000) && (var.batch_size <= 10 || var.batching_window_seconds >= 1)
    error_message = "batch_size must be 1 to 10 on FIFO, 1 to 10000 on standard queues, and above 10 only with batching_window_seconds >= 1."
  }
  # A FIFO record's attempts are its receives less those the attempt ledger knows were untried;
  # in batches of one none is held back behind a neighbour, so the receives alone are close.
  validation {
    condition     = !var.fifo || var.batch_size == 1 || length(setintersection(keys(var.environment), ["REDRIVE_IDEMPOTENCY_TABLE", "REDRIVE_LEDGER_TABLE"])) > 0
    error_message = "On FIFO, batch_size above 1 needs the attempt ledger: a DynamoDB table in environment REDRIVE_LEDGER_TABLE or REDRIVE_IDEMPOTENCY_TABLE (the root module gives a consumer with an idempotency_key one), else a record held back behind its group would spend attempts it never had."
  }
}

variable "batching_window_seconds" {
  description = "Event source mapping batching window (0 on FIFO)."
  type        = number
  default     = 0

  validation {
    condition     = var.batching_window_seconds >= 0 && var.batching_window_seconds <= 300 && (!var.fifo || var.batching_window_seconds == 0)
    error_message = "batching_window_seconds must be 0 to 300, and 0 on FIFO queues."
  }
}

variable "maximum_concurrency" {
  description = "Event source mapping scaling_config.maximum_concurrency; null with provisioned_pollers, which AWS does not combine with it."
  type        = number
  default     = 10

  validation {
    condition     = var.maximum_concurrency == null ? true : var.maximum_concurrency >= 2 && var.maximum_concurrency <= 1000
    error_message = "maximum_concurrency must be between 2 and 1000, or null."
  }
  validation {
    condition     = var.maximum_concurrency == null || var.provisioned_pollers == null
    error_message = "maximum_concurrency and provisioned_pollers do not go together on one mapping (AWS refuses it): set maximum_concurrency = null to use provisioned pollers."
  }
}

variable "provisioned_pollers" {
  description = "Provisioned mode of the event source mapping (provisioned_poller_config): pollers kept warm for bursts, each about 5 MB/s; billed per poller-hour. null for on-demand scaling."
  type = object({
    minimum = number
    maximum = number
  })
  default = null

  validation {
    condition     = var.provisioned_pollers == null ? true : var.provisioned_pollers.minimum >= 2 && var.provisioned_pollers.minimum <= 200 && var.provisioned_pollers.maximum >= var.provisioned_pollers.minimum && var.provisioned_pollers.maximum <= 2000
    error_message = "provisioned_pollers: minimum 2 to 200 (SQS needs 2), maximum from the minimum to 2000."
  }
}

variable "mapping_metrics" {
  description = "The event source mapping's own counts (metrics_config EventCount: polled, invoked, failed, dropped events), with an alarm on failed invokes. Standard CloudWatch metric charges apply."
  type        = bool
  default     = true
  nullable    = false
}

variable "record_concurrency" {
  description = "REDRIVE_CONCURRENCY: records one invocation handles at once (on FIFO, one per message group at a time)."
  type        = number
  default     = 100

  validation {
    condition     = var.record_concurrency >= 1 && var.record_concurrency <= 10000 && floor(var.record_concurrency) == var.record_concurrency
    error_message = "record_concurrency must be a whole number from 1 to 10000."
  }
}

variable "log_retention_days" {
  description = "Retention of the function's log group."
  type        = number
  default     = 14

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be one of CloudWatch Logs' retention values."
  }
}

variable "alarm_topic_arn" {
  description = "SNS topic for alarm and OK notifications."
  type        = string
}

variable "alarm_period_seconds" {
  description = "Period of the alarms."
  type        = number
  default     = 60

  validation {
    condition     = var.alarm_period_seconds >= 60 && var.alarm_period_seconds % 60 == 0
    error_message = "alarm_period_seconds must be a multiple of 60: SQS and Lambda metrics come once a minute."
  }
}

variable "oldest_message_age_seconds" {
  description = "Alarm when the source queue's oldest message is older than this."
  type        = number
  default     = 300

  validation {
    condition     = var.oldest_message_age_seconds >= 60
    error_message = "oldest_message_age_seconds must be at least 60."
  }
}

variable "lane_depth_threshold" {
  description = "With the retry lane (FIFO with hold): alarm when the lane holds more visible messages than this, below the 120,000 a FIFO receive looks at (past them, heads sent to the lane after a held group's backlog are not seen)."
  type        = number
  default     = 100000
  nullable    = false

  validation {
    condition     = var.lane_depth_threshold >= 1 && var.lane_depth_threshold < 120000
    error_message = "lane_depth_threshold must be at least 1 and below 120000, the messages a FIFO receive looks at."
  }
}

variable "lane_oldest_message_age_seconds" {
  description = "With the retry lane (FIFO with hold): alarm when the lane's oldest message is older than this, a held group waiting that long for an operator; below message_retention_seconds less a day, when a hold ends in the DLQ."
  type        = number
  default     = 86400
  nullable    = false

  validation {
    condition     = var.lane_oldest_message_age_seconds >= 60 && (var.fifo_on_dead_letter != "hold" || var.lane_oldest_message_age_seconds < var.message_retention_seconds - 86400)
    error_message = "lane_oldest_message_age_seconds must be at least 60 and below message_retention_seconds less a day (when a hold ends in the DLQ)."
  }
}

variable "lambda_errors_threshold" {
  description = "Alarm when the function's Errors sum exceeds this in a period."
  type        = number
  default     = 0

  validation {
    condition     = var.lambda_errors_threshold >= 0
    error_message = "lambda_errors_threshold must be at least 0."
  }
}

variable "dlq_oldest_message_age_seconds" {
  description = "Alarm when the DLQ's oldest message is older than this: well under the DLQ's retention, so nothing expires unseen."
  type        = number
  default     = 3600
  nullable    = false

  validation {
    condition     = var.dlq_oldest_message_age_seconds >= 60 && var.dlq_oldest_message_age_seconds < var.dlq_message_retention_seconds
    error_message = "dlq_oldest_message_age_seconds must be at least 60 and below dlq_message_retention_seconds."
  }
}

variable "deferred_threshold" {
  description = "Alarm when the records deferred in a period (the EMF Deferred figure: a breaker is open) exceed this. An outage in progress: re-sent copies keep the source queue's age low."
  type        = number
  default     = 0
  nullable    = false

  validation {
    condition     = var.deferred_threshold >= 0
    error_message = "deferred_threshold must be at least 0."
  }
}

variable "transient_errors_threshold" {
  description = "Alarm when the transient errors in a period (the EMF TransientErrors figure) exceed this: a downstream failing, retries under way."
  type        = number
  default     = 10
  nullable    = false

  validation {
    condition     = var.transient_errors_threshold >= 0
    error_message = "transient_errors_threshold must be at least 0."
  }
}

variable "metrics_namespace" {
  description = "Namespace of the function's EMF metrics (REDRIVE_METRICS_NAMESPACE)."
  type        = string
  default     = "redrive"
  nullable    = false

  validation {
    condition     = length(var.metrics_namespace) >= 1 && length(var.metrics_namespace) <= 255
    error_message = "metrics_namespace must be 1 to 255 characters."
  }
}

variable "lambda_throttles_threshold" {
  description = "Alarm when the function's Throttles sum exceeds this in a period."
  type        = number
  default     = 0

  validation {
    condition     = var.lambda_throttles_threshold >= 0
    error_message = "lambda_throttles_threshold must be at least 0."
  }
}

variable "tags" {
  description = "Tags of every resource the module creates."
  type        = map(string)
  nullable    = false
  default     = {}
}

variable "health_alarms" {
  description = "The consumer's health alarms (source queue age, function errors and throttles, Deferred, TransientErrors). The DLQ's alarms are always on: a dead letter must not go unseen."
  type        = bool
  nullable    = false
  default     = true
}

variable "existing_queue" {
  description = "A source queue that already exists, with the DLQ its redrive policy names: the module then makes only the function, its mapping and the alarms. Its visibility timeout (at least 6 x the function timeout + window), maxReceiveCount (above max_attempts) and DLQ retention are the team's to keep."
  type = object({
    arn      = string
    url      = string
    name     = string
    dlq_arn  = string
    dlq_url  = string
    dlq_name = string
  })
  default = null

  validation {
    condition     = var.existing_queue == null || (endswith(coalesce(try(var.existing_queue.name, null), "-"), ".fifo") == var.fifo && endswith(coalesce(try(var.existing_queue.dlq_name, null), "-"), ".fifo") == var.fifo)
    error_message = "existing_queue: the queue's and the DLQ's names end in .fifo exactly when fifo is true."
  }
  validation {
    condition     = var.existing_queue == null || alltrue([for arn in [try(var.existing_queue.arn, ""), try(var.existing_queue.dlq_arn, "")] : can(regex("^arn:aws[a-z-]*:sqs:[a-z0-9-]+:[0-9]{12}:[a-zA-Z0-9_.-]{1,80}$", arn))])
    error_message = "existing_queue: arn and dlq_arn must be SQS queue ARNs."
  }
}
