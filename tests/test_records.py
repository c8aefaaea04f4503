from pathlib import Path

from course_utils.grading.records import Submission


def test_feedback_names_never_collide_between_a_folder_and_a_flattened_name():
    names = ["x/08_garbage.ipynb", "x__08_garbage.ipynb", "x\\08_garbage.ipynb", "08_garbage.ipynb"]
    slugs = {Submission(Path(n), n).slug for n in names}
    assert len(slugs) == len(names)
    assert Submission(Path("alice.ipynb"), "alice.ipynb").slug == "alice"  # plain names stay


def test_a_slug_is_the_same_on_every_run():
    assert (
        Submission(Path("a/b.ipynb"), "a/b.ipynb").slug == Submission(Path("z"), "a/b.ipynb").slug
    )
