variable "name" {
  description = "Function name; also names its role and log group."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9-_]{1,55}$", var.name))
    error_message = "name must be 1 to 55 letters, digits, hyphens or underscores: the role is <name>-<region code> (up to 8), and IAM allows 64 characters."
  }
}

variable "description" {
  description = "Function description."
  type        = string
  default     = ""
}

variable "zip" {
  description = "Path of the function's bootstrap.zip from `cargo lambda build --release --arm64 --output-format zip`."
  type        = string

  validation {
    condition     = endswith(var.zip, ".zip")
    error_message = "zip must be the path of a .zip file (target/lambda/<function>/bootstrap.zip)."
  }
}

variable "timeout_seconds" {
  description = "Function timeout."
  type        = number

  validation {
    condition     = var.timeout_seconds >= 1 && var.timeout_seconds <= 900
    error_message = "timeout_seconds must be between 1 and 900."
  }
}

variable "memory_mb" {
  description = "Function memory."
  type        = number
  default     = 256

  validation {
    condition     = var.memory_mb >= 128 && var.memory_mb <= 10240
    error_message = "memory_mb must be between 128 and 10240."
  }
}

variable "reserved_concurrency" {
  description = "Executions reserved for (and the cap of) the function; null for none. Set it on functions no event source mapping caps, such as asynchronously invoked ones."
  type        = number
  default     = null

  validation {
    # A conditional, not `||`: Terraform before 1.12 evaluates both sides of `||` and `null >= 0` fails
    # (Terraform 1.12.0 changelog, "Logical binary operators can now short-circuit").
    condition     = var.reserved_concurrency == null ? true : var.reserved_concurrency >= 0 && var.reserved_concurrency <= 1000
    error_message = "reserved_concurrency must be null or 0 to 1000 (the default account concurrency)."
  }
}

variable "managed_instances" {
  description = "Lambda Managed Instances: the capacity provider's ARN, invocations per execution environment, memory per vCPU (GiB); null for Lambda's default compute. The calling module validates it (modules/sqs-consumer)."
  type = object({
    capacity_provider_arn = string
    max_concurrency       = optional(number)
    memory_gib_per_vcpu   = optional(number)
  })
  default = null
}

variable "environment" {
  description = "Environment variables of the function."
  type        = map(string)
  nullable    = false
  default     = {}
}

variable "statements" {
  description = "IAM statements of the function's role besides its log group and X-Ray: name every resource."
  type = list(object({
    sid       = string
    actions   = list(string)
    resources = list(string)
  }))
  nullable = false

  validation {
    condition     = alltrue([for s in var.statements : length(s.actions) > 0 && length(s.resources) > 0])
    error_message = "Every statement needs at least one action and one resource."
  }
}

variable "recursive_loop" {
  description = "Lambda recursive loop detection: Allow for a function that re-sends to the queue that triggers it (and bounds those chains itself), Terminate otherwise."
  type        = string
  default     = "Terminate"

  validation {
    condition     = contains(["Allow", "Terminate"], var.recursive_loop)
    error_message = "recursive_loop must be Allow or Terminate."
  }
}

variable "log_retention_days" {
  description = "Retention of the function's log group."
  type        = number
  default     = 14

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be a retention CloudWatch Logs accepts (1, 3, 5, 7, 14, 30, 60, 90, ...)."
  }
}

variable "tags" {
  description = "Tags of the function, its role and its log group."
  type        = map(string)
  nullable    = false
  default     = {}
}
