variable "name_prefix" {
  description = "Prefix of the bucket's name (S3 completes it to a unique name); ignored with existing_bucket_name."
  type        = string
  default     = "redrive-payloads-"
  nullable    = false

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{0,36}$", var.name_prefix))
    error_message = "name_prefix must be 1 to 37 lowercase letters, digits, dots or hyphens, beginning with a letter or digit (S3's bucket_prefix)."
  }
}

variable "existing_bucket_name" {
  description = "A bucket of your own instead of a new one: nothing is created, the statements name it. Give it a lifecycle rule and a TLS-only policy yourself."
  type        = string
  default     = null

  validation {
    condition     = var.existing_bucket_name == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", coalesce(var.existing_bucket_name, "-")))
    error_message = "existing_bucket_name must be a bucket name (3 to 63 lowercase letters, digits, dots and hyphens), not an ARN or s3:// URL."
  }
}

variable "expire_after_days" {
  description = "Days after which the lifecycle rule deletes an object: longer than any copy may point at it (source retention plus DLQ retention, times the redrives a message may get)."
  type        = number
  nullable    = false

  validation {
    condition     = var.expire_after_days >= 1 && var.expire_after_days <= 3650 && floor(var.expire_after_days) == var.expire_after_days
    error_message = "expire_after_days must be a whole number of days from 1 to 3650."
  }
}

variable "writer_prefixes" {
  description = "Each consumer's key prefix (REDRIVE_PAYLOAD_PREFIX), by consumer: it may put and delete objects under its prefix only."
  type        = map(string)
  nullable    = false

  validation {
    condition     = alltrue([for key, prefix in var.writer_prefixes : endswith(prefix, "/") && !startswith(prefix, "/") && length(prefix) <= 512])
    error_message = "Each writer prefix ends with / and does not begin with one (redrive/orders/), at most 512 bytes."
  }
  validation {
    condition     = length(distinct(values(var.writer_prefixes))) == length(var.writer_prefixes)
    error_message = "Each consumer needs a prefix of its own: it deletes the objects under it."
  }
}

variable "tags" {
  description = "Tags of the bucket."
  type        = map(string)
  default     = {}
  nullable    = false
}
