"""Run budgets: checked before each model call; a breach stops the run, finished work kept."""

import pytest
from typer.testing import CliRunner

from clearance import (
    Agent,
    BudgetExceeded,
    ConfigError,
    ModelPrice,
    Orchestrator,
    RunBudget,
    RunLedger,
    RunOptions,
    RunServices,
    RunSpec,
    Task,
    Team,
    recorded_run_spec,
)
from clearance._context.verify import verify_run
from clearance.cli import app
from clearance.models import ModelResponse, Usage
from clearance.testing import FunctionModel

runner = CliRunner()

TEAM = """\
name: budgeted
model: fake:budget
budget: {tokens: BUDGET}
agents:
  - {name: alpha, instructions: "You are Alpha."}
tasks:
  - {id: a, title: First, description: Do the first step., assignee: alpha}
  - {id: b, title: Second, description: Do the second step., assignee: alpha, depends_on: [a]}
  - {id: c, title: Third, description: Do the third step., assignee: alpha, depends_on: [b]}
"""


class Costly(FunctionModel):
    """A model whose every answer costs ``tokens`` prompt tokens and 10 completion tokens."""

    def __init__(self, tokens: int) -> None:
        super().__init__(lambda request: "done", model_id="fake:budget")
        self.tokens = tokens

    async def request(self, request):
        answered = await super().request(request)
        usage = Usage(requests=1, prompt_tokens=self.tokens, completion_tokens=10)
        return ModelResponse(text=answered.text, model_id=self.model_id, usage=usage)


def costly(tokens: int) -> Costly:
    return Costly(tokens)


def three_tasks() -> list[Task]:
    return [
        Task(id="a", title="First", description="One.", assignee="alpha"),
        Task(id="b", title="Second", description="Two.", assignee="alpha", depends_on=("a",)),
        Task(id="c", title="Third", description="Three.", assignee="alpha", depends_on=("b",)),
    ]


TEAM_SPEC = Team(agents=(Agent(name="alpha", instructions="You are Alpha."),))


async def test_a_breach_stops_the_run_keeps_finished_work_and_a_larger_budget_finishes(tmp_path):
    ledger = RunLedger(f"sqlite:///{tmp_path}/runs.db")
    model = costly(90)
    options = RunOptions(budget=RunBudget(tokens=150), max_concurrency=1)
    orchestrator = Orchestrator(TEAM_SPEC, model=model, ledger=ledger, options=options)
    with pytest.raises(BudgetExceeded) as caught:
        await orchestrator.run_tasks(three_tasks())
    exc = caught.value
    assert (exc.limit, exc.used, exc.maximum, exc.subject) == ("tokens", 200, 150, "task:c")
    assert len(model.requests) == 2  # the third call was refused: nothing sent
    run = ledger.get_run(exc.run_id)
    assert run.status == "interrupted" and "budget.tokens" in (run.error or "")
    tasks = {t.task_id: t.status for t in ledger.tasks(exc.run_id)}
    assert tasks == {"a": "completed", "b": "completed", "c": "interrupted"}
    assert verify_run(ledger, exc.run_id).ok

    spec = recorded_run_spec(ledger, exc.run_id)
    assert spec.run_budget() == RunBudget(tokens=150)  # recorded with the run
    services = RunServices(models={"fake:budget": model})
    again = Orchestrator.from_run(
        exc.run_id, ledger=ledger, spec=spec.with_budget(tokens=1000), services=services
    )
    assert again.options.budget == RunBudget(tokens=1000)
    result = await again.resume(exc.run_id)
    assert result.status == "completed"
    assert len(model.requests) == 4  # task c, then the synthesis; a and b were kept
    assert verify_run(ledger, exc.run_id).ok
    assert [e.data["tokens"] for e in ledger.events(exc.run_id, "budget")] == [1000]


async def test_a_cost_budget_counts_each_model_at_its_price(tmp_path):
    ledger = RunLedger(f"sqlite:///{tmp_path}/runs.db")
    model = costly(1_000_000 - 10)  # each call: a million tokens, $2
    price = ModelPrice(input_per_mtok=2, output_per_mtok=2)
    budget = RunBudget(cost_usd=3.0, prices={"fake:budget": price})
    orchestrator = Orchestrator(
        TEAM_SPEC, model=model, ledger=ledger, options=RunOptions(budget=budget)
    )
    with pytest.raises(BudgetExceeded) as caught:
        await orchestrator.run_tasks(three_tasks())
    assert caught.value.limit == "cost_usd" and caught.value.used == pytest.approx(4.0)
    assert len(model.requests) == 2


async def test_a_cost_budget_without_a_price_for_a_model_is_refused_before_the_run(tmp_path):
    budget = RunBudget(cost_usd=1.0)
    orchestrator = Orchestrator(
        TEAM_SPEC, model=costly(1), ledger=RunLedger(f"sqlite:///{tmp_path}/r.db"),
        options=RunOptions(budget=budget),
    )  # fmt: skip
    with pytest.raises(ConfigError, match="none for fake:budget"):
        await orchestrator.run_tasks(three_tasks())


def cli(args: list[str]):
    return runner.invoke(app, args)


def test_cli_breach_mid_run_then_resume_with_a_larger_budget_completes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path}/runs.db"
    # The fake model's answers cost what the prompts hold; a small budget covers one task.
    path = tmp_path / "team.yaml"
    path.write_text(TEAM.replace("BUDGET", "1"))
    result = cli(["run", str(path), "--db", db])
    assert result.exit_code == 2, result.output
    assert "budget.tokens" in result.output and "clearance resume" in result.output
    ledger = RunLedger(db)
    (run,) = ledger.list_runs()
    statuses = {t.task_id: t.status for t in ledger.tasks(run.run_id)}
    assert statuses["a"] == "completed"  # the first call was within the budget
    assert statuses["b"] == "interrupted" and statuses["c"] == "pending"
    kept = {t.task_id: t.result for t in ledger.tasks(run.run_id)}["a"]
    assert cli(["verify", run.run_id, "--db", db]).exit_code == 0

    result = cli(["resume", run.run_id, "--db", db, "--budget-tokens", "100000"])
    assert result.exit_code == 0, result.output
    after = {t.task_id: t for t in ledger.tasks(run.run_id)}
    assert {k: t.status for k, t in after.items()} == dict.fromkeys("abc", "completed")
    assert after["a"].result == kept  # finished work was not run again
    assert cli(["verify", run.run_id, "--db", db]).exit_code == 0


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ("budget: {}\n", "give tokens, cost_usd or both"),
        ("budget: {tokens: 0}\n", "budget.tokens"),
        ("prices: {fake:x: {input_per_mtok: 1, output_per_mtok: 1}}\n", "prices"),
        ("budget: {cost_usd: 1}\nprices: {x: {input_per_mtok: -1, output_per_mtok: 1}}\n",
         "prices"),
    ],
)  # fmt: skip
def test_bad_budgets_in_team_files_are_one_line_errors(tmp_path, extra, fragment):
    path = tmp_path / "team.yaml"
    text = TEAM.replace("budget: {tokens: BUDGET}\n", "")
    path.write_text(extra + text)
    result = cli(["run", str(path), "--db", f"sqlite:///{tmp_path}/r.db"])
    assert result.exit_code == 2
    assert fragment in result.output


def test_resume_refuses_a_cost_budget_for_a_run_without_prices(tmp_path):
    # The budget is the spec's: resume's --budget-* replace its caps (`RunSpec.with_budget`).
    spec = RunSpec(agents=[{"name": "alpha", "instructions": "A."}])
    with pytest.raises(ConfigError, match="no prices"):
        spec.with_budget(cost_usd=2.0)
    assert spec.with_budget(tokens=5).run_budget() == RunBudget(tokens=5)
    assert spec.with_budget(tokens=5).with_budget().run_budget() == RunBudget(tokens=5)
    with pytest.raises(ConfigError, match=r"budget\.tokens"):
        spec.with_budget(tokens=0)
    priced = RunSpec.model_validate(
        {"agents": [{"name": "alpha", "instructions": "A."}],
         "budget": {"tokens": 9, "cost_usd": 1},
         "prices": {"fake:budget": {"input_per_mtok": 1, "output_per_mtok": 2}}}
    )  # fmt: skip
    raised = priced.with_budget(cost_usd=2.0).run_budget()
    assert raised == RunBudget(tokens=9, cost_usd=2.0, prices=priced.run_budget().prices)
    # The CLI names its option when the recorded run has no prices.
    team = tmp_path / "team.yaml"
    team.write_text(TEAM.replace("BUDGET", "100000"))
    db = f"sqlite:///{tmp_path}/runs.db"
    assert cli(["run", str(team), "--db", db]).exit_code == 0
    (run,) = RunLedger(db).list_runs()
    result = cli(["resume", run.run_id, "--db", db, "--budget-cost-usd", "2"])
    assert result.exit_code == 2 and "--budget-cost-usd: the run has no prices" in result.output


@pytest.mark.parametrize(
    ("value", "says"),
    [("nan", "must be a finite number, got nan"), ("inf", "must be a finite number, got inf"),
     ("-1", "must be at least 0, got -1")],
)  # fmt: skip
def test_resume_names_a_cost_budget_that_is_not_a_number_of_dollars(tmp_path, value, says):
    # NaN was answered "Input should be greater than or equal to 0": about the bound, not it.
    db = f"sqlite:///{tmp_path}/runs.db"
    result = cli(["resume", "run_x", "--db", db, "--budget-cost-usd", value])
    assert result.exit_code == 2
    assert "Invalid value for '--budget-cost-usd'" in result.output and says in result.output
    assert list(tmp_path.iterdir()) == []
