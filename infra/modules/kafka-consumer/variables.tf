variable "name" {
  description = "Name of the function; prefix of the lane (<name>.fifo), its DLQ, the discarded-batches queue and the alarms."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9-]{1,40}$", var.name))
    error_message = "name must be 1 to 40 letters, digits or hyphens."
  }
}

variable "function_zip" {
  description = "bootstrap.zip of the consumer (functions/sqs-consumer reads Kafka events and its lane)."
  type        = string
}

variable "source_cluster" {
  description = "The cluster: an Amazon MSK cluster by ARN (IAM access control), or a self-managed one by its bootstrap servers, with the Secrets Manager secret of its SASL/SCRAM-512 credentials, the subnets and security groups through which Lambda reaches it in a VPC, or both."
  type = object({
    msk_cluster_arn       = optional(string)
    bootstrap_servers     = optional(list(string))
    sasl_scram_secret_arn = optional(string)
    subnet_ids            = optional(list(string))
    security_group_ids    = optional(list(string))
  })
  nullable = false

  validation {
    condition     = (var.source_cluster.msk_cluster_arn == null) != (var.source_cluster.bootstrap_servers == null)
    error_message = "source_cluster names an MSK cluster (msk_cluster_arn) or a self-managed one (bootstrap_servers), exactly one of them."
  }
  validation {
    condition     = var.source_cluster.msk_cluster_arn == null || can(regex("^arn:aws[a-z-]*:kafka:[a-z0-9-]+:[0-9]{12}:cluster/[^/]+/[^/]+$", var.source_cluster.msk_cluster_arn))
    error_message = "msk_cluster_arn must be an MSK cluster's ARN (arn:aws:kafka:<region>:<account>:cluster/<name>/<uuid>)."
  }
  validation {
    condition     = var.source_cluster.bootstrap_servers == null || alltrue([for server in coalesce(var.source_cluster.bootstrap_servers, []) : can(regex("^[^:/ ]+:[0-9]{1,5}$", server))])
    error_message = "bootstrap_servers are host:port pairs."
  }
  validation {
    condition     = var.source_cluster.sasl_scram_secret_arn == null || (var.source_cluster.msk_cluster_arn == null && can(regex("^arn:aws[a-z-]*:secretsmanager:", var.source_cluster.sasl_scram_secret_arn)))
    error_message = "sasl_scram_secret_arn is a Secrets Manager secret's ARN, for a self-managed cluster (MSK here uses IAM access control)."
  }
  # Lambda asks a self-managed mapping for a source access configuration: credentials, or the VPC
  # it reaches the brokers through (Lambda API reference, SourceAccessConfiguration).
  validation {
    condition     = var.source_cluster.msk_cluster_arn != null || var.source_cluster.sasl_scram_secret_arn != null || var.source_cluster.subnet_ids != null
    error_message = "A self-managed cluster needs sasl_scram_secret_arn, or subnet_ids and security_group_ids (the VPC Lambda reaches it through), or both: Lambda refuses a self-managed mapping with neither."
  }
  validation {
    condition     = (var.source_cluster.subnet_ids == null) == (var.source_cluster.security_group_ids == null) && (var.source_cluster.subnet_ids == null || var.source_cluster.msk_cluster_arn == null)
    error_message = "subnet_ids and security_group_ids come together, for a self-managed cluster (Lambda reaches an MSK cluster through the cluster's own VPC)."
  }
  validation {
    condition     = alltrue([for id in coalesce(var.source_cluster.subnet_ids, []) : can(regex("^subnet-[0-9a-z]+$", id))]) && alltrue([for id in coalesce(var.source_cluster.security_group_ids, []) : can(regex("^sg-[0-9a-z]+$", id))])
    error_message = "subnet_ids are subnet-… ids and security_group_ids sg-… ids."
  }
}

variable "topics" {
  description = "The topic to read (Lambda takes one per mapping)."
  type        = list(string)
  nullable    = false

  validation {
    condition     = length(var.topics) == 1 && can(regex("^[a-zA-Z0-9._-]{1,249}$", var.topics[0]))
    error_message = "topics names exactly one topic (1 to 249 letters, digits, '.', '_' or '-'): a Lambda Kafka mapping reads one."
  }
}

variable "consumer_group_id" {
  description = "The consumer group whose offsets the mapping commits."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9._-]{1,200}$", var.consumer_group_id))
    error_message = "consumer_group_id must be 1 to 200 letters, digits, '.', '_' or '-'."
  }
}

variable "starting_position" {
  description = "Where a new consumer group starts: TRIM_HORIZON or LATEST."
  type        = string
  default     = "TRIM_HORIZON"

  validation {
    condition     = contains(["TRIM_HORIZON", "LATEST"], var.starting_position)
    error_message = "starting_position must be TRIM_HORIZON or LATEST."
  }
}

variable "batch_size" {
  description = "Records per batch."
  type        = number
  default     = 100

  validation {
    condition     = var.batch_size >= 1 && var.batch_size <= 10000
    error_message = "batch_size must be 1 to 10000."
  }
}

variable "batching_window_seconds" {
  description = "How long the mapping gathers records before it invokes."
  type        = number
  default     = 1

  validation {
    condition     = var.batching_window_seconds >= 0 && var.batching_window_seconds <= 300
    error_message = "batching_window_seconds must be 0 to 300."
  }
}

variable "pollers" {
  description = "Provisioned mode's event pollers, the mode Lambda's error controls for Kafka need."
  type = object({
    minimum = number
    maximum = number
  })
  default  = { minimum = 1, maximum = 2 }
  nullable = false

  validation {
    condition     = var.pollers.minimum >= 1 && var.pollers.minimum <= 200 && var.pollers.maximum >= var.pollers.minimum && var.pollers.maximum <= 2000
    error_message = "pollers: minimum 1 to 200, maximum from the minimum to 2000."
  }
}

variable "maximum_retry_attempts" {
  description = "Lambda's retries of a batch the function fails as a whole (the lane or the ledger could not take a record; the function crashed). -1, the default: until the batch succeeds or leaves the topic's retention; its partition waits meanwhile (the offset-lag alarm) and nothing is discarded. 0 to 10000: past them Lambda discards the batch, and this module makes a queue for its on-failure records (metadata only: the records stay in Kafka until its retention)."
  type        = number
  default     = -1

  validation {
    condition     = var.maximum_retry_attempts == -1 || (var.maximum_retry_attempts >= 0 && var.maximum_retry_attempts <= 10000)
    error_message = "maximum_retry_attempts must be -1 (until the batch succeeds) or 0 to 10000."
  }
}

variable "maximum_record_age_seconds" {
  description = "Records older than this are discarded instead of being processed; -1, the default: no limit but the topic's retention. A limit needs bounded maximum_retry_attempts: a record discarded for its age is recorded only in the on-failure queue, and with an on-failure destination Lambda caps unbounded retries at 10 anyway."
  type        = number
  default     = -1

  validation {
    condition     = var.maximum_record_age_seconds == -1 || (var.maximum_record_age_seconds >= 60 && var.maximum_record_age_seconds <= 604800)
    error_message = "maximum_record_age_seconds must be -1 (no limit) or 60 to 604800."
  }

  validation {
    condition     = var.maximum_record_age_seconds == -1 || var.maximum_retry_attempts >= 0
    error_message = "maximum_record_age_seconds needs bounded maximum_retry_attempts (0 to 10000): the on-failure queue that records what ages out exists only then, and Lambda would cap unbounded retries at 10 with it."
  }
}

variable "max_attempts" {
  description = "REDRIVE_MAX_ATTEMPTS: tries a record gets in all, the first one from Kafka and the rest in the lane."
  type        = number
  default     = 5
}

variable "lane_on_dead_letter" {
  description = "What a lane record that would be dead-lettered means for its key (REDRIVE_FIFO_ON_DEAD_LETTER of the lane). hold: it stays at the head of its key's group in the lane, the key's later records wait behind it (alarmed: Held) until an operator runs `dlq release`; each key's order is kept. continue: it goes to the DLQ and the key's later records pass it."
  type        = string
  default     = "hold"

  validation {
    condition     = contains(["hold", "continue"], var.lane_on_dead_letter)
    error_message = "lane_on_dead_letter must be \"hold\" or \"continue\"."
  }
}

variable "lane_visibility_timeout_seconds" {
  description = "The lane's visibility timeout (validated by modules/sqs-consumer: at least 6 x the function timeout)."
  type        = number
  default     = 360
}

variable "lane_message_retention_seconds" {
  description = "The lane's retention: how long a record may wait there."
  type        = number
  default     = 345600
}

variable "function_timeout_seconds" {
  description = "Function timeout."
  type        = number
  default     = 60
}

variable "function_memory_mb" {
  description = "Function memory."
  type        = number
  default     = 256
}

variable "environment" {
  description = "Extra environment (REDRIVE_*); REDRIVE_LANE_URL, REDRIVE_LEDGER_TABLE and the lane's settings are added."
  type        = map(string)
  nullable    = false
  default     = {}
}

variable "extra_statements" {
  description = "IAM statements the function needs beyond the cluster and its queues (its downstream)."
  type = list(object({
    sid       = string
    actions   = list(string)
    resources = list(string)
  }))
  nullable = false
  default  = []
}

variable "log_retention_days" {
  description = "Retention of the function's log group (validated by modules/sqs-consumer)."
  type        = number
  default     = 14
}

variable "offset_lag_threshold" {
  description = "Alarm when the mapping is this many records or more behind its topic (OffsetLag, Maximum) for offset_lag_minutes; missing data alarms too (the mapping stopped polling)."
  type        = number
  default     = 10000
  nullable    = false

  validation {
    condition     = var.offset_lag_threshold >= 1
    error_message = "offset_lag_threshold must be at least 1."
  }
}

variable "offset_lag_minutes" {
  description = "Minutes the offset lag (or its absence) must last before the alarm fires."
  type        = number
  default     = 5
  nullable    = false

  validation {
    condition     = var.offset_lag_minutes >= 1 && var.offset_lag_minutes <= 60 && floor(var.offset_lag_minutes) == var.offset_lag_minutes
    error_message = "offset_lag_minutes must be a whole number from 1 to 60."
  }
}

variable "alarm_topic_arn" {
  description = "SNS topic for alarm and OK notifications."
  type        = string
}

variable "tags" {
  description = "Tags of every resource the module creates."
  type        = map(string)
  default     = {}
  nullable    = false
}
