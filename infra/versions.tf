terraform {
  # 1.9: validation blocks may refer to other variables (the cross-variable rules below).
  required_version = ">= 1.9"

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
