"""The hub's service layer: every write, behind one unit of work (``uow.UnitOfWork``).

One service per concern, each a small class built once per application by ``hub.core.Hub`` and
reached from a request as ``hub.accounts``, ``hub.environments``, ``hub.publishing``,
``hub.downloads`` and ``hub.blobs``:

* ``accounts``: users, tokens, organisations and their members, web sessions, the bootstrap admin;
* ``environments``: claiming a name, visibility, stars, the derived fields of an environment;
* ``publishing``: staging, validating and publishing uploads, yanking;
* ``downloads``: download counters;
* ``blobs``: the storage's identity (paired with the database) and collecting orphaned blobs.

Routers (``hub.api``, ``hub.web``, ``hub.index``, ``hub.legacy``) read through a session they are
given (``hub.api.deps.SessionDep``) and write only by calling a service; services raise the domain
errors of ``hub.errors``, which the application maps to HTTP in one handler.
"""
