# The module every stack of bench/faults.sh applies: no providers (nothing can be
# downloaded), only outputs, so a run costs Terraform's own work and Bosun's. The driver
# gives every run a new TF_VAR_n, so every apply changes an output and writes a new state
# version.
variable "n" {
  type = string
}

locals {
  message = "bosun faults run ${var.n}"
}

output "n" {
  value = var.n
}

output "message" {
  value = local.message
}
