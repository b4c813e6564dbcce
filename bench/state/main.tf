# The Terraform configuration bench/state.sh applies against both backends: 40 outputs
# computed from variables and locals. No providers, so nothing is downloaded. The driver
# passes a new -var iteration=N on every apply, so every output changes and every apply
# writes a new state.

variable "iteration" {
  type = number
}

variable "environment" {
  type    = string
  default = "bench"
}

variable "regions" {
  type    = list(string)
  default = ["eu-west-1", "eu-central-1", "us-east-1", "us-west-2"]
}

locals {
  name   = "${var.environment}-${var.iteration}"
  base   = 10000 + var.iteration * 7
  ports  = [for i in range(8) : 8000 + i + var.iteration]
  tags   = { for i in range(10) : "tag${i}" => "${local.name}-${i}" }
  hosts  = [for r in var.regions : "app-${var.iteration}.${r}.example.internal"]
  subnet = cidrsubnet("10.0.0.0/8", 8, var.iteration % 256)
}

output "o00" {
  value = "${local.name}-string-0"
}

output "o01" {
  value = "${local.name}-string-1"
}

output "o02" {
  value = "${local.name}-string-2"
}

output "o03" {
  value = "${local.name}-string-3"
}

output "o04" {
  value = "${local.name}-string-4"
}

output "o05" {
  value = "${local.name}-string-5"
}

output "o06" {
  value = "${local.name}-string-6"
}

output "o07" {
  value = "${local.name}-string-7"
}

output "o08" {
  value = "${local.name}-string-8"
}

output "o09" {
  value = "${local.name}-string-9"
}

output "o10" {
  value = local.base + 0
}

output "o11" {
  value = local.base + 1
}

output "o12" {
  value = local.base + 2
}

output "o13" {
  value = local.base + 3
}

output "o14" {
  value = local.base + 4
}

output "o15" {
  value = local.base + 5
}

output "o16" {
  value = local.base + 6
}

output "o17" {
  value = local.base + 7
}

output "o18" {
  value = local.base + 8
}

output "o19" {
  value = local.base + 9
}

output "o20" {
  value = [for p in local.ports : p + 0]
}

output "o21" {
  value = [for p in local.ports : p + 100]
}

output "o22" {
  value = [for p in local.ports : p + 200]
}

output "o23" {
  value = [for p in local.ports : p + 300]
}

output "o24" {
  value = [for p in local.ports : p + 400]
}

output "o25" {
  value = { for k, v in local.tags : k => "${v}-0" }
}

output "o26" {
  value = { for k, v in local.tags : k => "${v}-1" }
}

output "o27" {
  value = { for k, v in local.tags : k => "${v}-2" }
}

output "o28" {
  value = { for k, v in local.tags : k => "${v}-3" }
}

output "o29" {
  value = { for k, v in local.tags : k => "${v}-4" }
}

output "o30" {
  value = local.hosts[0]
}

output "o31" {
  value = local.hosts[1]
}

output "o32" {
  value = local.hosts[2]
}

output "o33" {
  value = local.hosts[3]
}

output "o34" {
  value = cidrsubnet(local.subnet, 8, 0)
}

output "o35" {
  value = cidrsubnet(local.subnet, 8, 1)
}

output "o36" {
  value = cidrsubnet(local.subnet, 8, 2)
}

output "o37" {
  value = { name = local.name, iteration = var.iteration, ports = local.ports, hosts = local.hosts }
}

output "o38" {
  value = sha256(local.name)
}

output "o39" {
  value = upper(join(",", local.hosts))
}
