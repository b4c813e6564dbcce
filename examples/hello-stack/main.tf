# A stack that needs no provider download: variables, locals and outputs only.
# Bosun's runner points its state at Bosun (an http backend override file).

variable "environment" {
  type    = string
  default = "demo"
}

variable "replicas" {
  type    = number
  default = 2
}

locals {
  service = "hello-${var.environment}"
  hosts   = [for i in range(var.replicas) : "${local.service}-${i}.internal"]
}

output "service" {
  value = local.service
}

output "hosts" {
  value = local.hosts
}

output "replicas" {
  value = var.replicas
}
