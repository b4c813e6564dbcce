"""bosun/testing: a tiny Terraform provider for Bosun's tests (protocol 6, Python `tf`).

Two resource types with the same schema, `testing_thing` and `testing_protected`:
`name` (string, required, a change replaces the resource), `kind` (string), `tags` (map
of string), `size` (number) and the computed `id`. Nothing exists outside Terraform's
state: create stores what was planned plus an `id` made from the type and the name,
read returns the state as it is, update stores the plan, delete forgets.

bosun-testkit writes this file next to a launcher that Terraform runs as the plugin
(see tf_provider.rs).
"""

from tf import runner, schema, types
from tf.iface import Provider, Resource


def resource_schema():
    return schema.Schema(
        # Version 0 stated: with no version the framework "upgrades" every state it
        # reads and warns about it.
        version=0,
        attributes=[
            schema.Attribute("id", types.String(), computed=True),
            schema.Attribute("name", types.String(), required=True, requires_replace=True),
            schema.Attribute("kind", types.String(), optional=True),
            schema.Attribute("tags", types.Map(types.String()), optional=True),
            schema.Attribute("size", types.Number(), optional=True),
        ],
    )


class Thing(Resource):
    def __init__(self, provider):
        self.provider = provider

    @classmethod
    def get_name(cls):
        return "thing"

    @classmethod
    def get_schema(cls):
        return resource_schema()

    def create(self, ctx, planned):
        return {**planned, "id": f"{ctx.type_name}/{planned['name']}"}

    def read(self, ctx, current):
        return current

    def update(self, ctx, current, planned):
        return {**planned, "id": current["id"]}

    def delete(self, ctx, current):
        return None


class Protected(Thing):
    """The same as a thing under another type name, for policies about resource types."""

    @classmethod
    def get_name(cls):
        return "protected"


class TestingProvider(Provider):
    def full_name(self):
        return "registry.terraform.io/bosun/testing"

    def get_model_prefix(self):
        return "testing_"

    def get_provider_schema(self, diags):
        return schema.Schema(version=0)

    def validate_config(self, diags, config):
        pass

    def configure_provider(self, diags, config):
        pass

    def get_data_sources(self):
        return []

    def get_resources(self):
        return [Thing, Protected]


if __name__ == "__main__":
    runner.run_provider(TestingProvider())
