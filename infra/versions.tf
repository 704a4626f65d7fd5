terraform {
  # The Terraform `make test` plans every configuration with (tools/plan-infra); 1.9 is the least
  # that takes the cross-variable validation rules.
  required_version = ">= 1.11.4"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "6.25.0"
    }
  }
}

provider "aws" {
  default_tags {
    tags = var.tags
  }
}
