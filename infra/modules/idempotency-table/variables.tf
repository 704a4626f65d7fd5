variable "name" {
  description = "Name of the table."
  type        = string

  validation {
    condition     = can(regex("^[a-zA-Z0-9_.-]{3,255}$", var.name))
    error_message = "name must be 3 to 255 letters, digits, underscores, hyphens or dots (DynamoDB's table names)."
  }
}

variable "tags" {
  description = "Tags of the table."
  type        = map(string)
  default     = {}
  nullable    = false
}
