from tether import Message, Session
from tether.store import Store


async def test_append_and_tail(store: Store) -> None:
    s = await Session.create(store, directory="/tmp")
    await s.append(Message.user("hello"), Message.assistant("hi"))
    tail = await s.tail(10)
    assert [e.seq for e in tail] == [1, 2]
    assert tail[1].body == Message.assistant("hi")
    assert s.info.message_count == 2
    assert s.title == "hello"
