# docs/namespace_scope.py: a Sphinx extension for the API reference (docs/README.md).
# Breathe renders every namespace a header opens as a C++ declaration, so `namespace tinyscale`
# would be declared once per header: duplicate declarations and duplicate ids, which -W turns into
# errors. Here a namespace is a scope instead (what `.. cpp:namespace-push::` does): its members
# are declared once each, with their full names, and the namespace itself is a plain heading.
from docutils import nodes
from sphinx.domains.cpp import DefinitionParser
from breathe.renderer.sphinxrenderer import SphinxRenderer, WithContext


def visit_namespace(self, node):
    file_data = self.compound_parser.parse(node.refid)
    name = file_data.compounddef.compoundname
    parent_context = self.context.create_child_context(file_data)
    env = self.app.env
    ast = DefinitionParser(name, location=self.state.document, config=env.config) \
        .parse_namespace_object()
    root = env.domaindata["cpp"]["root_symbol"]
    scope = root.add_name(ast.nestedName, ast.templatePrefix)  # a name without a declaration
    saved = (env.temp_data.get("cpp:parent_symbol"), env.temp_data.get("cpp:last_symbol"),
             env.ref_context.get("cpp:parent_key"))
    env.temp_data["cpp:parent_symbol"], env.temp_data["cpp:last_symbol"] = scope, None
    env.ref_context["cpp:parent_key"] = scope.get_lookup_key()
    self.nesting_level += 1  # members then use their short names inside the scope
    try:
        with WithContext(self, parent_context.create_child_context(file_data.compounddef)):
            content = self.render(file_data, parent_context)
    finally:
        self.nesting_level -= 1
        env.temp_data["cpp:parent_symbol"], env.temp_data["cpp:last_symbol"], key = saved
        if key is None:
            env.ref_context.pop("cpp:parent_key", None)
        else:
            env.ref_context["cpp:parent_key"] = key
    # Breathe renders a namespace's own members first and its inner namespaces last, so content
    # that starts with an inner namespace has no members of its own: no heading for it then
    # (a header that opens tinyscale::comm::threads shows just that namespace).
    if not content or "namespace-scope" in content[0].get("classes", []):
        return content
    return [nodes.rubric(text="namespace " + name, classes=["namespace-scope"])] + content


def setup(app):
    SphinxRenderer.visit_namespace = visit_namespace
    # conf.py sets this to a hash of this file: editing the file then rebuilds every page.
    app.add_config_value("namespace_scope_version", "", "env")
    return {"parallel_read_safe": False, "parallel_write_safe": True}
