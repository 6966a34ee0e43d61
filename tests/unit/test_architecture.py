"""The package's import graph: no cycles, function-local imports included.

grimp (import-linter's graph builder) reads every import statement of
``pluglog``, at module level or inside a function. The layers themselves are
held by the import-linter contract in pyproject.toml (``lint-imports`` runs
in CI next to ruff); this test names any cycle, which a layers contract
cannot see inside one package.
"""

import grimp


def _cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(module):
        # Iterative DFS: the package is deep enough to hit the recursion limit.
        work = [(module, iter(sorted(graph.find_modules_directly_imported_by(module))))]
        index[module] = low[module] = counter[0]
        counter[0] += 1
        stack.append(module)
        on_stack.add(module)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for name in ("a", "a.b", "a.c", "a.d"):
        graph.add_module(name)
    graph.add_import(importer="a.b", imported="a.c")
    graph.add_import(importer="a.c", imported="a.b")
    graph.add_import(importer="a.c", imported="a.d")
    assert _cycles(graph) == [["a.b", "a.c"]]


def test_pluglog_has_no_import_cycle():
    graph = grimp.build_graph("pluglog")
    assert _cycles(graph) == []
